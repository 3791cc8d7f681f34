"""The resident local model process on the real 0.5B: shared by two processes, restarted when killed, closed to
other users, gone after its idle time. One process (and one load of the weights) serves the module's tests."""

import asyncio
import importlib.util
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

import cli_process
from drivetrain.models.local import LocalModel
from drivetrain.models.resident import ResidentModel, ensure_running, ping, stop
from drivetrain.models.resolve import resolve_model
from drivetrain.models.weights import cache_dir

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("llama_cpp") is None,
        reason="llama-cpp-python (drivetrain[local-small]) is not installed",
    ),
    pytest.mark.xdist_group("local_model"),
]

SRC = str(Path(__file__).resolve().parent.parent / "src")
NOBODY = 65534

# one request through the seam, from a process of its own: it prints the process's pid and the reply
ASK = textwrap.dedent(
    """
    import asyncio, json, os, sys
    from drivetrain.messages import Message
    from drivetrain.models.base import ModelRequest
    from drivetrain.models.resident import ResidentModel, ping
    model = ResidentModel("0.5b")
    pieces = []
    request = ModelRequest([Message.user(sys.argv[1])], max_tokens=12, seed=1, on_text=pieces.append)
    reply = asyncio.run(model.respond(request))
    print(json.dumps({"pid": ping(os.environ)["pid"], "text": reply.content[0].text, "streamed": "".join(pieces)}))
    """
)


def _env(folder: Path, idle: str = "300") -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DRIVETRAIN_DAEMON_DIR=str(folder),
        DRIVETRAIN_LOCAL_DAEMON="1",
        DRIVETRAIN_DAEMON_IDLE=idle,
        DRIVETRAIN_CACHE_DIR=str(cache_dir().parent),
        PYTHONPATH=SRC,
    )
    return env


@pytest.fixture(scope="module")
def daemon():
    parent = Path(tempfile.mkdtemp(prefix="dt-res-"))  # short: a socket path has at most 107 bytes
    os.chmod(parent, 0o755)
    env = _env(parent / "run")
    ensure_running(env)
    yield env
    stop(env)
    shutil.rmtree(parent, ignore_errors=True)


def _ask(env: dict[str, str], prompt: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", ASK, prompt], env=env, stdout=subprocess.PIPE, text=True)


def _wait_gone(pid: int, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.waitpid(pid, os.WNOHANG)  # our own child when this process started it
        except ChildProcessError:
            pass
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_two_processes_share_one_model(daemon):
    before = ping(daemon)
    first, second = _ask(daemon, "Say hello."), _ask(daemon, "Name a colour.")
    out = [json.loads(p.communicate(timeout=300)[0]) for p in (first, second)]
    assert [p.returncode for p in (first, second)] == [0, 0]
    assert {o["pid"] for o in out} == {before["pid"]}  # one model process answered both
    assert all(o["text"].strip() for o in out)
    assert [o["streamed"] for o in out] == [o["text"] for o in out]  # the text came as it was generated
    after = ping(daemon)
    assert after["served"] == before["served"] + 2
    assert after["models"] == ["local/qwen2.5-coder-0.5b"]  # the weights loaded once, for both


def test_a_killed_model_process_is_restarted_on_next_use(daemon):
    old = ping(daemon)["pid"]
    os.kill(old, signal.SIGKILL)
    assert _wait_gone(old)
    assert Path(daemon["DRIVETRAIN_DAEMON_DIR"], "model.sock").exists()  # stale: nobody listens on it
    assert ping(daemon) == {}
    done = _ask(daemon, "Say yes.")
    out = json.loads(done.communicate(timeout=300)[0])
    assert done.returncode == 0 and out["text"].strip()
    assert out["pid"] != old


def test_a_seeded_conversation_starts_as_in_a_new_process_though_another_left_its_kv_state(daemon):
    """The resident process keeps the last request's KV state, and reusing it changes the floating-point sums and so
    the sample: a seeded conversation's first request evaluates its prompt as a new process would (the same reply,
    the same count evaluated, the second time too); its later requests reuse its own state."""
    from drivetrain.messages import Message
    from drivetrain.models.base import ModelRequest

    model = ResidentModel("0.5b", env=daemon)
    first = [Message.user("Name one prime number.")]

    def ask(messages, seed):
        reply = asyncio.run(model.respond(ModelRequest(messages, max_tokens=8, seed=seed)))
        return reply, model.last_stats

    asyncio.run(model.respond(ModelRequest(first, max_tokens=8)))  # unseeded: leaves its KV state
    (one, a), (two, b) = ask(first, 7), ask(first, 7)
    assert a.prompt_eval_tokens == b.prompt_eval_tokens == a.prompt_tokens, (a, b)  # nothing reused
    assert one.content == two.content
    later = [*first, one.message, Message.user("Another.")]
    _, c = ask(later, 7)
    assert c.prompt_eval_tokens < c.prompt_tokens  # a later request reuses its conversation's own state


def test_a_model_process_running_other_code_is_replaced_and_each_checkout_has_its_own(tmp_path, monkeypatch):
    """A process started by other code (this installation edited or upgraded since) is stopped and a new one
    started; another checkout's commands use a folder (and so a process) of their own."""
    from drivetrain.models import resident

    env = _env(Path(tempfile.mkdtemp(prefix="dt-code-")) / "run")
    old = ensure_running(env)
    assert ping(env)["code"] == resident.code_identity() and ensure_running(env) == old  # the same code: found
    monkeypatch.setattr(resident, "code_identity", lambda: "other code")
    new = ensure_running(env)
    assert new != old and _wait_gone(old) and ping(env)["pid"] == new
    monkeypatch.undo()
    wide = {**env, "DRIVETRAIN_LOCAL_PARALLEL": "2"}  # asked for sequences the running process does not have
    newer = ensure_running(wide)
    assert newer != new and _wait_gone(new) and ping(env)["parallel"] == 2 and ensure_running(wide) == newer
    stop(env)
    shutil.rmtree(Path(env["DRIVETRAIN_DAEMON_DIR"]).parent, ignore_errors=True)

    other = tmp_path / "other" / "src"  # another checkout of the same code
    shutil.copytree(SRC, other, ignore=shutil.ignore_patterns("__pycache__"))
    show = "import os; from drivetrain.models.resident import runtime_dir as r; print(r({'XDG_RUNTIME_DIR': '/x'}))"
    where = {
        src: subprocess.run(
            [sys.executable, "-c", show],
            env={**os.environ, "PYTHONPATH": str(src)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for src in (SRC, str(other))
    }
    assert all(w.startswith("/x/drivetrain/") for w in where.values()) and len(set(where.values())) == 2, where


def test_the_socket_is_private_and_another_user_is_refused(daemon):
    if os.getuid() != 0:
        pytest.skip("running a client as another user needs root")
    folder = Path(daemon["DRIVETRAIN_DAEMON_DIR"])
    ensure_running(daemon)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "model.sock").stat().st_mode) == 0o600
    connect = textwrap.dedent(
        f"""
        import socket
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect({str(folder / "model.sock")!r})
        except PermissionError:
            print("no access")
            raise SystemExit
        try:  # a refused peer is answered at once and the connection closed: the send may find it gone
            s.sendall(b'{{"op": "status"}}\\n')
        except (BrokenPipeError, ConnectionResetError):
            pass
        print(s.makefile().readline().strip())
        """
    )

    def as_nobody() -> str:
        return subprocess.run(
            ["/usr/bin/python3", "-c", connect], user=NOBODY, capture_output=True, text=True, check=True, cwd="/"
        ).stdout.strip()

    assert as_nobody() == "no access"  # the folder and the socket keep other users out
    refused = ping(daemon)["refused"]
    os.chmod(folder, 0o755)  # were the permissions opened by mistake, the uid check still refuses
    os.chmod(folder / "model.sock", 0o666)
    try:
        reply = json.loads(as_nobody())
    finally:
        os.chmod(folder / "model.sock", 0o600)
        os.chmod(folder, 0o700)
    assert reply["error"].startswith("refused") and "pid" not in reply
    assert ping(daemon)["refused"] == refused + 1


def test_idle_exit_and_model_status_stop(tmp_path):
    parent = Path(tempfile.mkdtemp(prefix="dt-idle-"))
    env = _env(parent / "run", idle="1.5")
    status = cli_process.run(
        [sys.executable, "-m", "drivetrain", "model", "status"], env=env, capture_output=True, text=True
    )
    assert status.returncode == 1 and "no model process" in status.stdout
    pid = ensure_running(env)
    shown = cli_process.run(
        [sys.executable, "-m", "drivetrain", "model", "status", "--json"], env=env, capture_output=True, text=True
    )
    assert json.loads(shown.stdout)["pid"] == pid
    assert _wait_gone(pid, timeout=20)  # nothing asked of it for 1.5 s: it exits
    assert not (parent / "run" / "model.sock").exists()
    assert "idle for 1.5 s" in (parent / "run" / "model.log").read_text()

    env["DRIVETRAIN_DAEMON_IDLE"] = "300"
    pid = ensure_running(env)
    stopped = cli_process.run(
        [sys.executable, "-m", "drivetrain", "model", "stop"], env=env, capture_output=True, text=True
    )
    assert f"stopped the model process {pid}" in stopped.stdout
    assert _wait_gone(pid) and ping(env) == {}
    shutil.rmtree(parent, ignore_errors=True)


def test_the_daemon_is_the_default_and_no_daemon_keeps_the_model_in_process(monkeypatch):
    env = {"DRIVETRAIN_LOCAL_MODEL": "0.5b"}
    assert isinstance(resolve_model("local", env=env), ResidentModel)
    assert isinstance(resolve_model("local", env={**env, "DRIVETRAIN_LOCAL_DAEMON": "0"}), LocalModel)
    monkeypatch.delenv("DRIVETRAIN_LOCAL_DAEMON")
    from drivetrain.cli.model import apply_settings

    assert apply_settings(["-p", "hi", "--no-daemon"], Path.cwd()) == ["-p", "hi"]
    assert os.environ["DRIVETRAIN_LOCAL_DAEMON"] == "0"


def test_a_cancelled_command_stops_its_generation_in_the_model_process(daemon):
    """A command that stops waiting (Ctrl-C, a wall budget) closes its connection; the process stops generating."""
    from drivetrain.messages import Message
    from drivetrain.models.base import ModelRequest

    async def cancel_soon() -> None:
        model = ResidentModel("0.5b", env=daemon)
        request = ModelRequest([Message.user("Count from 1 to 500, one number a line.")], max_tokens=2000)
        task = asyncio.ensure_future(model.respond(request))
        while ping(daemon).get("in_flight") != 1:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    served = ping(daemon)["served"]
    asyncio.run(cancel_soon())
    deadline = time.monotonic() + 30  # the reply stops at its next token (seconds apart on a loaded machine)
    while ping(daemon)["in_flight"] and time.monotonic() < deadline:
        time.sleep(0.05)
    status = ping(daemon)
    assert status["in_flight"] == 0 and status["served"] == served  # stopped, not finished


def test_the_settings_files_turn_the_model_process_off_and_set_its_idle_time(tmp_path, monkeypatch):
    from drivetrain.cli.model import apply_settings

    (tmp_path / ".drivetrain").mkdir()
    settings = {"localModelDaemon": False, "localModelIdleSeconds": 60}
    (tmp_path / ".drivetrain" / "settings.json").write_text(json.dumps(settings))
    monkeypatch.delenv("DRIVETRAIN_LOCAL_DAEMON")
    monkeypatch.setenv("DRIVETRAIN_DAEMON_IDLE", "")  # so that the value set below is undone after the test
    monkeypatch.delenv("DRIVETRAIN_DAEMON_IDLE")
    assert apply_settings(["-p", "hi"], tmp_path) == ["-p", "hi"]
    assert os.environ["DRIVETRAIN_LOCAL_DAEMON"] == "0" and os.environ["DRIVETRAIN_DAEMON_IDLE"] == "60"


def test_the_code_identity_changes_when_llama_cpp_is_built_again(tmp_path, monkeypatch):
    """A model process started before llama.cpp was built again (for this CPU, models/cpu.py) runs the old build: its
    identity differs, so it is replaced. The libraries are found, not imported."""
    from drivetrain.models import resident

    pkg = tmp_path / "llama_cpp"
    (pkg / "lib").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('found, not imported')\n")
    (pkg / "lib" / "libggml-cpu.so").write_bytes(b"avx2 build")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "llama_cpp", raising=False)
    before = resident.code_identity.__wrapped__()
    (pkg / "lib" / "libggml-cpu.so").write_bytes(b"avx-512 build")
    assert resident.code_identity.__wrapped__() != before
