"""The drivetrain CLI as a process of its own, started in milliseconds instead of seconds.

A new interpreter spends about two seconds importing drivetrain and the SDKs before the CLI reads its first
argument, and the suite starts the CLI hundreds of times. So each test worker keeps one process (the zygote) that
has imported them once; ``Popen`` and ``run`` ask it to fork a child, which takes the test's arguments,
environment, working folder and standard streams and runs ``drivetrain.cli.main.main`` in them. The child is a
real process: its own pid, signals, exit status, process group when asked, files and sockets, and it exits through
the interpreter's exit handlers as the console script would.

What it is not: the console script's own start (its shim, the interpreter's start-up, the ``PYTHON*`` variables).
A command that is not the CLI, an environment whose ``PYTHON*`` or locale variables differ from the zygote's, an
argument this module does not take (``stderr=STDOUT``, ``encoding``, ...) or DRIVETRAIN_TEST_SUBPROCESS=1 gets a
real ``subprocess`` instead; the tests that are about the process's start
call ``subprocess`` themselves.
"""

from __future__ import annotations

import atexit
import io
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

DRIVETRAIN = str(Path(sys.executable).parent / "drivetrain")
# what the interpreter reads at start-up and the zygote cannot take over: a child whose environment sets one of
# these differently needs an interpreter of its own. PYTHONUNBUFFERED is taken over (the child makes its standard
# streams again), PYTHONPATH when each of its folders is on the zygote's path already; the others do not change
# what a test sees (PYTHONDONTWRITEBYTECODE, PYTHONHASHSEED).
_STARTUP = (
    "PYTHONIOENCODING",
    "PYTHONUTF8",
    "PYTHONWARNINGS",
    "PYTHONDEVMODE",
    "PYTHONHOME",
    "PYTHONSAFEPATH",
    "PYTHONNOUSERSITE",
    "PYTHONOPTIMIZE",
    "PYTHONFAULTHANDLER",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
)
_PRELOAD = (
    "drivetrain.cli.main",
    "drivetrain.cli.build",
    "drivetrain.models.anthropic",
    "drivetrain.models.openai",
    "drivetrain.sessions.open",
)


def _cli_args(args: list[str]) -> list[str] | None:
    """The CLI's own arguments, when ``args`` starts the CLI; else None."""
    args = [os.fspath(a) for a in args]
    if args[:1] == [DRIVETRAIN]:
        return args[1:]
    if args[:3] == [sys.executable, "-m", "drivetrain"]:
        return args[3:]
    return None


# ---------------------------------------------------------------- the zygote


def _serve(path: str) -> None:
    for name in _PRELOAD:
        __import__(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, None)
    open_fds = {listener.fileno(), selector.fileno()}  # none of them is the child's
    parent = os.getppid()
    drivetrain = sys.modules["drivetrain"].__file__
    assert drivetrain is not None
    print(json.dumps([*sys.path, str(Path(drivetrain).resolve().parents[1])]), flush=True)
    while os.getppid() == parent:
        for key, _ in selector.select(timeout=0.5):
            if key.data is None:
                conn, _ = listener.accept()
                message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
                pid = os.fork()
                if pid == 0:
                    for fd in open_fds:
                        os.close(fd)
                    _child(json.loads(message), fds, conn)
                for fd in fds:
                    os.close(fd)
                conn.sendall(b"%d" % pid)
                pidfd = os.pidfd_open(pid)
                selector.register(pidfd, selectors.EVENT_READ, (pid, conn))
                open_fds |= {pidfd, conn.fileno()}
            else:
                pid, conn = key.data
                selector.unregister(key.fd)
                os.close(key.fd)
                _, status = os.waitpid(pid, 0)
                open_fds -= {key.fd, conn.fileno()}
                try:
                    conn.sendall(b"%d" % os.waitstatus_to_exitcode(status))
                except OSError:  # the test gave up on it
                    pass
                conn.close()


def _child(request: dict[str, Any], fds: list[int], conn: socket.socket) -> None:
    """In the forked child: become the CLI run the request describes, and exit as its interpreter would."""
    conn.close()
    if request["new_session"]:
        os.setsid()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    _standard_streams(unbuffered=bool(os.environ.get("PYTHONUNBUFFERED")))
    sys.argv = [DRIVETRAIN, *request["args"]]
    code = 1
    try:
        from drivetrain.cli.main import main

        code = main(request["args"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, int | None):
            print(exc.code, file=sys.stderr)
    except KeyboardInterrupt:  # as the interpreter does: the traceback, then death by SIGINT
        traceback.print_exc()
        _exit_handlers()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        traceback.print_exc()
    _exit_handlers()
    os._exit(code)


def _standard_streams(unbuffered: bool) -> None:
    """sys.stdin, stdout and stderr made again on fds 0-2, as an interpreter starting with this environment would
    make them: stdout line-buffered on a terminal, else in blocks; stderr by lines; -u's write-through."""
    encoding, errors = sys.stdout.encoding, sys.stdout.errors
    sys.stdin = io.TextIOWrapper(open(0, "rb", closefd=False), encoding=encoding, errors=errors)
    for fd, name in ((1, "stdout"), (2, "stderr")):
        binary = open(fd, "wb", buffering=0 if unbuffered else -1, closefd=False)
        stream = io.TextIOWrapper(
            binary,  # type: ignore[arg-type]
            encoding=encoding,
            errors=sys.stderr.errors if name == "stderr" else errors,
            line_buffering=name == "stderr" or os.isatty(fd),
            write_through=unbuffered,
        )
        setattr(sys, name, stream)
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr


def _exit_handlers() -> None:
    threading._shutdown()  # type: ignore[attr-defined]  # the interpreter waits for non-daemon threads at exit
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


# ---------------------------------------------------------------- the test's side


class _Zygote:
    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="cli-zygote-")
        self.path = os.path.join(self.dir, "sock")
        self.startup = _startup(os.environ)
        self.proc = subprocess.Popen(
            [sys.executable, __file__, self.path], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        ready = self.proc.stdout.readline()
        if not ready:
            raise RuntimeError(f"the CLI zygote did not start (exit {self.proc.wait()})")
        self.path_entries = {str(Path(p).resolve()) for p in json.loads(ready) if p}
        atexit.register(self.close)

    def serves(self, env: Mapping[str, str]) -> bool:
        paths = [str(Path(p).resolve()) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        return self.proc.poll() is None and _startup(env) == self.startup and all(p in self.path_entries for p in paths)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def _startup(env: Mapping[str, str]) -> dict[str, str]:
    return {k: env[k] for k in _STARTUP if k in env}


_zygote: _Zygote | None = None
_zygote_lock = threading.Lock()


def _the_zygote() -> _Zygote:
    global _zygote
    with _zygote_lock:
        if _zygote is None or _zygote.proc.poll() is not None:
            _zygote = _Zygote()
        return _zygote


def _stream(spec: Any, fd: int, mode: str) -> tuple[int, IO[Any] | None, int | None]:
    """(the fd the child gets, the parent's end of a pipe or None, an fd to close once sent)."""
    if spec is None:
        return fd, None, None
    if spec == subprocess.DEVNULL:
        devnull = os.open(os.devnull, os.O_RDWR)
        return devnull, None, devnull
    if spec == subprocess.PIPE:
        r, w = os.pipe()
        child, mine = (r, w) if mode == "w" else (w, r)
        return child, os.fdopen(mine, mode + "b"), child
    if isinstance(spec, int):
        return spec, None, None
    return spec.fileno(), None, None


class ForkedProcess:
    """The part of ``subprocess.Popen`` the tests use, for a CLI forked from the zygote."""

    def __init__(
        self,
        args: list[str],
        cli_args: list[str],
        *,
        cwd: str | os.PathLike[str] | None,
        env: dict[str, str],
        stdin: Any,
        stdout: Any,
        stderr: Any,
        text: bool,
        start_new_session: bool,
        zygote: _Zygote,
    ) -> None:
        self.args = args
        self.returncode: int | None = None
        streams = [_stream(stdin, 0, "w"), _stream(stdout, 1, "r"), _stream(stderr, 2, "r")]
        pipes = [s[1] for s in streams]
        if text:
            pipes = [None if p is None else _text(p) for p in pipes]
        self.stdin, self.stdout, self.stderr = pipes
        request = {
            "args": cli_args,
            "cwd": os.fspath(cwd) if cwd is not None else os.getcwd(),
            "env": env,
            "new_session": start_new_session,
        }
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._conn.connect(zygote.path)
            socket.send_fds(self._conn, [json.dumps(request).encode()], [s[0] for s in streams])
            self.pid = int(self._conn.recv(64))
        finally:
            for _, _, to_close in streams:
                if to_close is not None:
                    os.close(to_close)

    def poll(self) -> int | None:
        if self.returncode is None:
            self._conn.setblocking(False)
            try:
                self._set(self._conn.recv(64))
            except BlockingIOError:
                pass
            if self.returncode is None:
                self._conn.setblocking(True)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._conn.settimeout(timeout)
            try:
                self._set(self._conn.recv(64))
            except TimeoutError:
                self._conn.settimeout(None)
                raise subprocess.TimeoutExpired(self.args, timeout) from None
        assert self.returncode is not None
        return self.returncode

    def _set(self, reply: bytes) -> None:
        if not reply:
            raise RuntimeError("the CLI zygote went away before the child's exit status")
        self.returncode = int(reply)
        self._conn.close()

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, input: str | bytes | None = None, timeout: float | None = None) -> tuple[Any, Any]:
        results: dict[str, Any] = {}

        def drain(name: str, pipe: IO[Any]) -> None:
            results[name] = pipe.read()
            pipe.close()

        threads = [
            threading.Thread(target=drain, args=(name, pipe), daemon=True)
            for name, pipe in (("out", self.stdout), ("err", self.stderr))
            if pipe is not None
        ]
        for t in threads:
            t.start()
        if self.stdin is not None:
            try:
                if input:
                    self.stdin.write(input)
                self.stdin.close()
            except BrokenPipeError:
                pass
        self.wait(timeout)
        for t in threads:
            t.join()
        return results.get("out"), results.get("err")

    def __enter__(self) -> ForkedProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        for pipe in (self.stdin, self.stdout, self.stderr):
            if pipe is not None:
                pipe.close()
        self.wait()


def _text(pipe: IO[bytes]) -> IO[str]:
    import io

    return io.TextIOWrapper(pipe, encoding="utf-8", errors="replace", line_buffering=True)  # type: ignore[arg-type]


def Popen(args: list[str], **kwargs: Any) -> ForkedProcess | subprocess.Popen[Any]:
    """``subprocess.Popen``, but the CLI is forked from the zygote when it can be (see the module's docstring)."""
    cli_args = _cli_args(args)
    env = dict(os.environ if kwargs.get("env") is None else kwargs["env"])
    taken = {"cwd", "env", "stdin", "stdout", "stderr", "text", "start_new_session"}
    if (
        cli_args is None
        or os.environ.get("DRIVETRAIN_TEST_SUBPROCESS")
        or kwargs.get("stderr") == subprocess.STDOUT
        or not set(kwargs) <= taken
        or not (zygote := _the_zygote()).serves(env)
    ):
        return subprocess.Popen(args, **kwargs)
    return ForkedProcess(
        [os.fspath(a) for a in args],
        cli_args,
        cwd=kwargs.get("cwd"),
        env=env,
        stdin=kwargs.get("stdin"),
        stdout=kwargs.get("stdout"),
        stderr=kwargs.get("stderr"),
        text=bool(kwargs.get("text")),
        start_new_session=bool(kwargs.get("start_new_session")),
        zygote=zygote,
    )


def run(
    args: list[str],
    *,
    input: str | bytes | None = None,
    capture_output: bool = False,
    timeout: float | None = None,
    check: bool = False,
    **kwargs: Any,
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run`` on ``Popen`` above."""
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    with Popen(args, **kwargs) as proc:
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    result = subprocess.CompletedProcess(proc.args, proc.wait(), out, err)
    if check:
        result.check_returncode()
    return result


if __name__ == "__main__":
    _serve(sys.argv[1])
