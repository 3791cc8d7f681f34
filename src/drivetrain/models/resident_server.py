"""The resident model process (``python -m drivetrain.models.resident_server FOLDER``): it holds the local models'
weights and KV caches, answers ``models/resident.py``'s clients on FOLDER/model.sock, and exits after an idle time.

Requests of several commands take turns at one llama.cpp context (a queue, ``LocalModel``'s lock): each request
carries its whole history, so contexts cannot mix, and on this CPU decoding is compute-bound (docs/local-model.md
has the figures), so sequences decoded together would not finish sooner. ``$DRIVETRAIN_LOCAL_PARALLEL`` > 1 gives
the model that many sequences of one context instead (``models/batched.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import socket
import struct
import sys
import time
from pathlib import Path

from drivetrain.errors import ConfigError, HarnessError
from drivetrain.jsontypes import JsonObject
from drivetrain.models.local import LocalModel, parallel_setting
from drivetrain.models.resident import (
    DEFAULT_IDLE_S,
    ENV_IDLE,
    LINE_LIMIT,
    code_identity,
    decode_request,
    encode_response,
    private_dir,
)

_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket, as the kernel recorded it at connect()."""
    uid: int = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))[1]
    return uid


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class ResidentServer:
    def __init__(self, folder: Path, idle_s: float, parallel: int = 1) -> None:
        self.folder, self.idle_s, self.parallel = folder, idle_s, parallel
        self.path = folder / "model.sock"
        self.models: dict[str, LocalModel] = {}
        self.code = code_identity()  # the code it runs, read once at start (a client with other code replaces it)
        self.started = time.time()
        self.last = time.monotonic()
        self.in_flight = 0
        self.served = 0
        self.refused = 0
        self.done = asyncio.Event()

    def model(self, choice: str) -> LocalModel:
        if choice not in self.models:
            self.models[choice] = LocalModel(choice or None, parallel=self.parallel)
        return self.models[choice]

    def status(self) -> JsonObject:
        return {
            "pid": os.getpid(),
            "uid": os.getuid(),
            "code": self.code,
            "parallel": self.parallel,
            "socket": str(self.path),
            "started": self.started,
            "idle_s": round(time.monotonic() - self.last, 1),
            "idle_limit_s": self.idle_s,
            "in_flight": self.in_flight,
            "served": self.served,
            "refused": self.refused,
            "models": sorted(m.name for m in self.models.values()),
            "rss_mb": round(_rss_mb(), 1),
        }

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock: socket.socket = writer.get_extra_info("socket")
        try:
            if peer_uid(sock) != os.getuid():
                self.refused += 1
                writer.write(b'{"error": "refused: the model process serves its own user only", "kind": "config"}\n')
                return
            line = await reader.readline()
            if not line:
                return
            body: JsonObject = json.loads(line)
            op = body.get("op")
            if op == "status":
                writer.write(json.dumps(self.status()).encode() + b"\n")
            elif op == "stop":
                writer.write(json.dumps({"stopping": os.getpid()}).encode() + b"\n")
                self.done.set()
            elif op == "load":
                await self._load(body, writer)
            elif op == "respond":
                await self._respond(body, reader, writer)
        except (OSError, ValueError, asyncio.IncompleteReadError):
            pass  # the client went away or sent nonsense: its problem alone
        finally:
            with contextlib.suppress(OSError):
                await writer.drain()
                writer.close()

    async def _load(self, body: JsonObject, writer: asyncio.StreamWriter) -> None:
        try:
            await asyncio.to_thread(self.model(body["model"]).load)
            writer.write(json.dumps(self.status()).encode() + b"\n")
        except HarnessError as exc:
            writer.write(json.dumps({"error": str(exc), "kind": "config"}).encode() + b"\n")

    async def _respond(self, body: JsonObject, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.in_flight += 1
        try:
            model = self.model(body["model"])

            def text(piece: str) -> None:
                live = model.live
                writer.write(json.dumps({"t": piece, "n": live.tokens if live else 0}).encode() + b"\n")

            request = decode_request(body["request"])
            if body.get("stream"):
                request = dataclasses.replace(request, on_text=text)
            task = asyncio.ensure_future(model.respond(request))
            gone = asyncio.ensure_future(reader.read(1))  # b"": the client closed (cancelled); stop generating
            await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, HarnessError):
                    await task
                return
            gone.cancel()
            try:
                response = task.result()
            except HarnessError as exc:
                kind = "config" if isinstance(exc, ConfigError) else "model"
                writer.write(json.dumps({"error": str(exc), "kind": kind}).encode() + b"\n")
                return
            out = {"response": encode_response(response, model.last_stats)}
            writer.write(json.dumps(out).encode() + b"\n")
            self.served += 1
        finally:
            self.in_flight -= 1
            self.last = time.monotonic()

    async def idle_watch(self) -> None:
        while not self.done.is_set():
            await asyncio.sleep(min(1.0, self.idle_s / 5))
            if self.in_flight == 0 and time.monotonic() - self.last >= self.idle_s:
                print(f"idle for {self.idle_s:g} s: exiting", file=sys.stderr, flush=True)
                self.done.set()

    async def serve(self) -> None:
        old = os.umask(0o177)  # the socket is created 0600
        try:
            server = await asyncio.start_unix_server(self.handle, str(self.path), limit=LINE_LIMIT)
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        ino = self.path.stat().st_ino
        (self.folder / "model.pid").write_text(f"{os.getpid()}\n")
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(sig, self.done.set)
        print(f"pid {os.getpid()} listening on {self.path} (idle limit {self.idle_s:g} s)", file=sys.stderr, flush=True)
        watch = asyncio.ensure_future(self.idle_watch())
        async with server:
            await self.done.wait()
        watch.cancel()
        with contextlib.suppress(OSError):  # only our own socket: a newer process may have replaced it
            if self.path.stat().st_ino == ino:
                self.path.unlink()
                (self.folder / "model.pid").unlink()


def main(argv: list[str]) -> int:
    os.umask(0o077)  # the pid file, the saved KV prefixes: this user's only
    folder = private_dir(Path(argv[0]))
    idle_s = float(os.environ.get(ENV_IDLE) or DEFAULT_IDLE_S)
    asyncio.run(ResidentServer(folder, idle_s, parallel_setting(os.environ)).serve())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
