"""The resident local model: one background process per user holds the weights and the KV cache, and every
command that uses the local model asks it over a Unix socket instead of loading 1.1 GB itself.

``ResidentModel`` is the Model seam on the client side; ``models/resident_server.py`` is the process. The socket
sits in a folder only its user may enter (0700) and is itself 0600; the server also checks the connecting
process's uid (``SO_PEERCRED``). The wire is one JSON object a line: a request, then ``{"t": text}`` lines while
the reply streams, then the reply or an error. The first command that needs the model starts the process (a lock
file keeps two commands from starting two); a process that died leaves a socket nobody answers on, which the next
command removes before starting a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import hashlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict
from pathlib import Path

from drivetrain.errors import ConfigError, ModelError
from drivetrain.host.procs import child_env
from drivetrain.jsontypes import JsonObject
from drivetrain.messages import Message, Usage, block_from_wire
from drivetrain.models.base import ModelRequest, ModelResponse
from drivetrain.models.local import GenerationProgress, GenerationStats, parallel_setting
from drivetrain.models.weights import ENV_MODEL, bundled_spec

ENV_DAEMON = "DRIVETRAIN_LOCAL_DAEMON"  # "0": the local model runs in the command's own process
ENV_DIR = "DRIVETRAIN_DAEMON_DIR"  # where the socket lives (default: $XDG_RUNTIME_DIR/drivetrain)
ENV_IDLE = "DRIVETRAIN_DAEMON_IDLE"  # seconds without a request before the process exits (default 900)
DEFAULT_IDLE_S = 900.0
START_TIMEOUT_S = 120.0
LINE_LIMIT = 64 * 1024 * 1024  # one request line: a long history with its tool schemas


def daemon_enabled(env: Mapping[str, str]) -> bool:
    return env.get(ENV_DAEMON, "1").strip().lower() not in ("0", "false", "no", "off")


PACKAGE = Path(__file__).resolve().parent.parent  # this installation of drivetrain
INSTALLATION = hashlib.sha256(str(PACKAGE).encode()).hexdigest()[:12]  # its folder's name under the runtime folder


@functools.cache
def code_identity() -> str:
    """What a model process of this installation runs: the installation's folder, the contents of the code that
    serves the model (``models/``, ``messages.py``) and the llama.cpp build's libraries (name, size, time: found,
    not imported). A process started by another checkout, an older version of this one or before llama.cpp was
    built again (for this CPU: ``models/cpu.py``) answers with another identity."""
    digest = hashlib.sha256(INSTALLATION.encode())
    for path in sorted([*(PACKAGE / "models").glob("*.py"), PACKAGE / "messages.py"]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    spec = importlib.util.find_spec("llama_cpp")
    for lib in sorted(Path(spec.origin).parent.glob("lib/*")) if spec and spec.origin else []:
        stat = lib.stat()
        digest.update(f"{lib.name}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    return digest.hexdigest()[:16]


def runtime_dir(env: Mapping[str, str]) -> Path:
    """The folder of the socket, the pid file and the log: $DRIVETRAIN_DAEMON_DIR, else a folder of this
    installation (named by a hash of its path: two checkouts run a process each) in ``drivetrain`` in
    $XDG_RUNTIME_DIR (a per-user tmpfs), else in ``~/.cache/drivetrain/run``."""
    if env.get(ENV_DIR):
        return Path(env[ENV_DIR]).absolute()
    if env.get("XDG_RUNTIME_DIR"):
        return Path(env["XDG_RUNTIME_DIR"]) / "drivetrain" / INSTALLATION
    return Path(env.get("HOME") or Path.home()) / ".cache" / "drivetrain" / "run" / INSTALLATION


def private_dir(path: Path) -> Path:
    """``path``, created 0700 if missing; refused if it belongs to another user or others may enter it."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    if st.st_uid != os.getuid():
        raise ConfigError(f"{path} belongs to another user; the model process will not use it")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def socket_path(env: Mapping[str, str]) -> Path:
    return runtime_dir(env) / "model.sock"


def encode_request(request: ModelRequest) -> JsonObject:
    return {
        "messages": [m.to_wire() for m in request.messages],
        "system": request.system,
        "tools": request.tools,
        "max_tokens": request.max_tokens,
        "stop_sequences": request.stop_sequences,
        "temperature": request.temperature,
        "seed": request.seed,
        "tool_choice": request.tool_choice,
        "grammar": request.grammar,
        "keep_prefix": request.keep_prefix,
    }


def decode_request(data: JsonObject) -> ModelRequest:
    return ModelRequest(
        messages=[Message.from_wire(m) for m in data["messages"]],
        system=data["system"],
        tools=data["tools"],
        max_tokens=data["max_tokens"],
        stop_sequences=data["stop_sequences"],
        temperature=data["temperature"],
        seed=data["seed"],
        tool_choice=data["tool_choice"],
        grammar=data["grammar"],
        keep_prefix=data["keep_prefix"],
    )


def encode_response(response: ModelResponse, stats: GenerationStats | None) -> JsonObject:
    return {
        "content": [b.to_wire() for b in response.content],
        "stop_reason": response.stop_reason,
        "usage": response.usage.to_wire(),
        "model": response.model,
        "id": response.id,
        "stats": asdict(stats) if stats is not None else None,
    }


def decode_response(data: JsonObject) -> tuple[ModelResponse, GenerationStats | None]:
    response = ModelResponse(
        content=tuple(block_from_wire(b) for b in data["content"]),
        stop_reason=data["stop_reason"],
        usage=Usage(**data["usage"]),
        model=data["model"],
        id=data["id"],
    )
    return response, GenerationStats(**data["stats"]) if data["stats"] else None


class ResidentModel:
    """The Model protocol on the user's resident model process, started (or found) on first use."""

    def __init__(self, model: str | None = None, *, env: Mapping[str, str] | None = None, n_ctx: int = 8192) -> None:
        self._env = dict(os.environ if env is None else env)
        choice = model if model is not None else self._env.get(ENV_MODEL, "")
        spec = bundled_spec(choice)
        # a path is sent absolute: the process may have been started from another folder
        self.choice = choice if spec is not None or not choice else str(Path(choice).absolute())
        self.name = f"local/{spec.key if spec else Path(choice).stem}"
        self.n_ctx = n_ctx
        self.context_window = n_ctx
        self.last_stats: GenerationStats | None = None
        self.live: GenerationProgress | None = None
        self.path = socket_path(self._env)
        self.parallel = parallel_setting(self._env)  # the process it starts decodes that many requests together

    def load(self) -> None:
        """Start (or find) the process and have it load the weights now, not on the first request."""
        reply = request_once(self._env, {"op": "load", "model": self.choice}, start=True)
        if "error" in reply:
            raise ConfigError(str(reply["error"]))

    async def respond(self, request: ModelRequest) -> ModelResponse:
        await asyncio.to_thread(ensure_running, self._env)
        try:
            reader, writer = await asyncio.open_unix_connection(str(self.path), limit=LINE_LIMIT)
        except OSError as exc:
            raise ModelError(f"the local model process at {self.path} did not answer: {exc}") from exc
        try:
            body = {"op": "respond", "model": self.choice, "stream": request.on_text is not None}
            body["request"] = encode_request(request)
            writer.write(json.dumps(body).encode() + b"\n")
            await writer.drain()
            self.live = GenerationProgress()
            while line := await reader.readline():
                msg = json.loads(line)
                if "t" in msg:
                    if self.live.first_token_at is None:
                        self.live.first_token_at = time.perf_counter()
                    self.live.tokens = msg["n"]
                    if request.on_text is not None:
                        request.on_text(msg["t"])
                elif "error" in msg:
                    kind = ConfigError if msg.get("kind") == "config" else ModelError
                    raise kind(msg["error"])
                else:
                    response, self.last_stats = decode_response(msg["response"])
                    return response
            raise ModelError("the local model process closed the connection mid-reply (did it die?)")
        finally:
            self.live = None
            writer.close()  # on cancellation the process sees the end of the stream and stops generating
            with contextlib.suppress(OSError, asyncio.CancelledError):
                await writer.wait_closed()


def request_once(env: Mapping[str, str], body: JsonObject, *, start: bool = False) -> JsonObject:
    """One request and its one-line reply; ``{}`` when no process answers (and ``start`` is False)."""
    if start:
        ensure_running(env)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(None if body.get("op") == "load" else 10.0)
            s.connect(str(socket_path(env)))
            s.sendall(json.dumps(body).encode() + b"\n")
            with s.makefile("rb") as f:
                line = f.readline()
    except OSError:
        return {}
    reply: JsonObject = json.loads(line) if line else {}
    return reply


def ping(env: Mapping[str, str]) -> JsonObject:
    """The process's status, or ``{}`` when none answers."""
    return request_once(env, {"op": "status"})


@contextlib.contextmanager
def _start_lock(folder: Path) -> Iterator[None]:
    fd = os.open(folder / "start.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def ensure_running(env: Mapping[str, str]) -> int:
    """The pid of the user's model process, started if none answers (a stale socket of a dead one removed) or if
    the one that answers runs other code (``code_identity``: this installation, edited or upgraded since it
    started) — that one is stopped first."""
    if (status := ping(env)) and _serves(status, env):
        return int(status["pid"])
    folder = private_dir(runtime_dir(env))
    with _start_lock(folder):
        if status := ping(env):  # another command started it while this one waited for the lock
            if _serves(status, env):
                return int(status["pid"])
            stop(env)
        with contextlib.suppress(FileNotFoundError):
            (folder / "model.sock").unlink()  # a dead process's socket
        return _spawn(env, folder)


def _serves(status: JsonObject, env: Mapping[str, str]) -> bool:
    """Whether the process that answered runs this installation's code with the sequences ``env`` asks for."""
    return status.get("code") == code_identity() and status.get("parallel", 1) == parallel_setting(env)


def _spawn(env: Mapping[str, str], folder: Path) -> int:
    with open(os.open(folder / "model.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab") as log:
        child = subprocess.Popen(
            [sys.executable, "-m", "drivetrain.models.resident_server", str(folder)],
            env=child_env(environ=env),  # it outlives the command: none of its credentials
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,  # not in the command's process group: ^C of a command leaves it running
            cwd="/",
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if status := ping(env):
            return int(status["pid"])
        if child.poll() is not None:
            raise ConfigError(f"the local model process exited at start ({child.returncode}); see {folder}/model.log")
        time.sleep(0.02)
    raise ConfigError(f"the local model process did not answer within {START_TIMEOUT_S:g} s; see {folder}/model.log")


def stop(env: Mapping[str, str], timeout_s: float = 10.0) -> int | None:
    """Ask the process to exit and wait until it has; its pid, or None when none was running."""
    status = ping(env)
    if not status:
        return None
    pid = int(status["pid"])
    request_once(env, {"op": "stop"})
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.02)
    return pid


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):  # a zombie (our own child, not yet reaped) counts as gone
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    return True
