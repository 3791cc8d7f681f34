"""Running the app on uvicorn: ``ModelServer`` in a background thread (tests, embedding), and the
command's foreground server, one process or ``--workers`` of them.

Shutdown is graceful either way: the server turns new requests away with 503 (``ServeState.draining``),
stops listening, lets the requests in flight finish (up to ``grace`` seconds), then exits.
"""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import signal
import socket
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import TypedDict, Unpack

import uvicorn
from opentelemetry.trace import Tracer
from starlette.types import ASGIApp

from drivetrain.models.base import Model
from drivetrain.serve.app import build_app, is_loopback
from drivetrain.serve.state import ServeState, Settings

# Every ServeState of this process, so a signal to a worker process drains them all.
_LIVE: list[ServeState] = []


class _Server(uvicorn.Server):
    """uvicorn's server that marks the app as draining the moment it is asked to stop."""

    started_event: threading.Event | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        for state in _LIVE:
            state.draining = True
        super().handle_exit(sig, frame)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started_event is not None:
            self.started_event.set()


def uvicorn_config(app: ASGIApp, *, grace: float, quick: bool) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        log_config=None,
        access_log=False,  # serve writes its own access log (with tokens)
        lifespan="on",
        # uvicorn annotates it int, but only hands it to asyncio.timeout, which takes fractions of a second
        timeout_graceful_shutdown=grace,  # type: ignore[arg-type]
        server_header=False,
        proxy_headers=False,
        http="httptools" if _has("httptools") else "h11",
        loop="uvloop" if quick and _has("uvloop") else "asyncio",
    )


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound now so a taken port fails here (OSError) and port 0 gets its number."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError:
        sock.close()
        raise
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class ServerOptions(TypedDict, total=False):
    """The ``Settings`` a ``ModelServer`` takes by keyword (besides ``host`` and ``log``)."""

    api_key: str | None
    max_body: int
    max_concurrent: int | None
    max_queue: int
    commit_after: float
    keepalive_every: float


class ModelServer:
    """Serve ``model`` on ``host:port`` (0: any free port) from a background thread until ``close()``.

    with ModelServer(model) as server:   # 127.0.0.1, a free port
        anthropic.Anthropic(base_url=server.url, api_key="unused")
        openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
    """

    def __init__(
        self,
        model: Model,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        log: Callable[[str], None] | None = None,
        grace: float = 30.0,
        tracer: Tracer | None = None,
        **settings: Unpack[ServerOptions],
    ):
        self.model = model
        self.host, self.port, self.grace = host, port, grace
        self.state = ServeState(model, Settings(host=host, log=log, **settings), tracer=tracer)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def calls_in_flight(self) -> int:
        """Model calls running or queued."""
        return self.state.admission.running + self.state.admission.waiting

    def start(self) -> ModelServer:
        sock = bind(self.host, self.port)
        self.port = sock.getsockname()[1]
        server = self._server = _Server(uvicorn_config(build_app(self.state), grace=self.grace, quick=False))
        server.started_event = started = threading.Event()
        loop = self.loop = asyncio.new_event_loop()
        _LIVE.append(self.state)

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(server.serve(sockets=[sock]))
            finally:
                sock.close()
                started.set()

        self._thread = threading.Thread(target=run, name="drivetrain-serve", daemon=True)
        self._thread.start()
        started.wait(30)
        return self

    def drain(self) -> None:
        """Turn new requests away with 503; those in flight go on."""
        self.state.draining = True

    def close(self) -> None:
        """Stop: new requests get 503, those in flight finish (up to ``grace`` seconds)."""
        server, thread, loop = self._server, self._thread, self.loop
        if server is None or thread is None or loop is None:  # not started, or closed already
            return
        self.drain()
        server.should_exit = True
        thread.join(timeout=self.grace + 10)
        loop.close()
        _LIVE.remove(self.state)
        self._server = self._thread = None

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_forever(state: ServeState, sock: socket.socket, grace: float) -> None:
    """One process, in the foreground; Ctrl-C or SIGTERM stops it gracefully."""
    _LIVE.append(state)
    # uvicorn re-raises the signal that stopped it once it is done; a stop asked for is a clean exit
    signal.signal(signal.SIGTERM, lambda *_: None)
    server = _Server(uvicorn_config(build_app(state), grace=grace, quick=True))
    # What the imports made lives as long as the process: out of the collector's way, a full collection
    # walks only what requests made (it walked the ~200,000 objects of the imports, every few hundred requests)
    gc.freeze()
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass


def serve_workers(make_state: Callable[[], ServeState], sock: socket.socket, workers: int, grace: float) -> None:
    """``workers`` processes accepting on ``sock``, each with its own state (model client, counters) from
    ``make_state`` (a module-level function: it is called in the worker). SIGTERM or Ctrl-C stops them
    all gracefully; the first worker to exit on its own stops the rest."""
    # fork where there is one: the workers start in a moment with what the parent imported (it has no event
    # loop or threads yet); a fresh interpreter elsewhere
    forks = "fork" in multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork") if forks else multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(target=_worker, args=(make_state, sock, grace), name=f"drivetrain-serve-{i}")
        for i in range(workers)
    ]
    for proc in procs:
        proc.start()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.is_set() and all(proc.is_alive() for proc in procs):
        stop.wait(0.5)
    for proc in procs:
        if proc.is_alive():
            proc.terminate()  # SIGTERM: the worker drains
    for proc in procs:
        proc.join(grace + 5)


def _worker(make_state: Callable[[], ServeState], sock: socket.socket, grace: float) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; the parent passes it on
    serve_forever(make_state(), sock, grace)


def stderr_log(line: str) -> None:
    print(f"drivetrain serve: {line}", file=sys.stderr, flush=True)


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


__all__ = ["ModelServer", "is_loopback", "serve_forever", "serve_workers", "stderr_log"]
