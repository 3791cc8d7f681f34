"""What `drivetrain serve` costs in front of a provider: latency against a direct request, and throughput.

    .venv/bin/python benchmarks/bench_serve.py                  # the figures in docs/serve.md
    .venv/bin/python benchmarks/bench_serve.py --delay-ms 0     # an upstream that answers at once

Three processes: a fast Anthropic-shaped upstream (canned answers, JSON or SSE, written on raw asyncio so
it is never the bottleneck; ``--delay-ms`` before the first byte, as a real model takes before its first
token), ``drivetrain serve --provider anthropic`` in front of it (the real command, as users run it), and
this process, a load generator on raw keep-alive connections (an SDK client would cost more CPU than the
server it measures). The same requests go to the upstream directly and through serve.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import ClassVar

REQUEST = {
    "model": "bench",
    "max_tokens": 256,
    "system": "You are a coding agent. " * 20,
    "tools": [
        {
            "name": "Read",
            "description": "Read a file.",
            "input_schema": {
                "type": "object",
                "properties": {"file_path": {"type": "string"}},
                "required": ["file_path"],
            },
        }
    ],
    "messages": [{"role": "user", "content": "Summarise README.md in one sentence."}],
}
ANSWER = "The README explains how to install drivetrain and run its agent loop against a model."


# ----------------------------------------------------------------- the upstream


def _answer(stream: bool, model: str) -> bytes:
    usage = {"input_tokens": 120, "output_tokens": 18, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    message = {
        "id": "msg_bench",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": ANSWER}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": usage,
    }
    if not stream:
        body = json.dumps(message).encode()
        return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    events = [
        ("message_start", {"type": "message_start", "message": dict(message, content=[], stop_reason=None)}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ),
    ]
    words = ANSWER.split(" ")
    for i in range(0, len(words), 3):
        piece = " ".join(words[i : i + 3]) + (" " if i + 3 < len(words) else "")
        events.append(
            (
                "content_block_delta",
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}},
            )
        )
    events += [
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}, "usage": usage},
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    body = b"".join(f"event: {e}\ndata: {json.dumps(d)}\n\n".encode() for e, d in events)
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    )


class _Upstream(asyncio.Protocol):
    answers: ClassVar[dict] = {}
    delay = 0.0

    def connection_made(self, transport):
        self.transport, self.buffer = transport, b""

    def data_received(self, data):
        self.buffer += data
        while True:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buffer[:head_end].lower()
            length = int(head.split(b"content-length:")[1].split(b"\r\n")[0]) if b"content-length:" in head else 0
            if len(self.buffer) < head_end + 4 + length:
                return
            body, self.buffer = self.buffer[head_end + 4 : head_end + 4 + length], self.buffer[head_end + 4 + length :]
            answer = self.answers[b'"stream": true' in body or b'"stream":true' in body]
            if self.delay:
                asyncio.get_running_loop().call_later(self.delay, self._write, answer)
            else:
                self.transport.write(answer)

    def _write(self, answer):
        if not self.transport.is_closing():
            self.transport.write(answer)


def run_upstream(port: int, delay_ms: float) -> None:
    _Upstream.answers = {False: _answer(False, "claude-bench"), True: _answer(True, "claude-bench")}
    _Upstream.delay = delay_ms / 1000

    async def main():
        server = await asyncio.get_running_loop().create_server(_Upstream, "127.0.0.1", port, backlog=2048)
        await server.serve_forever()

    asyncio.run(main())


# ----------------------------------------------------------------- the load generator


async def _read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    lower = head.lower()
    if b"content-length:" in lower:
        await reader.readexactly(int(lower.split(b"content-length:")[1].split(b"\r\n")[0]))
    elif b"chunked" in lower:
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    return status


def _request_bytes(port: int, stream: bool) -> bytes:
    body = json.dumps(dict(REQUEST, stream=stream)).encode()
    return (
        b"POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1:%d\r\ncontent-type: application/json\r\n"
        b"anthropic-version: 2023-06-01\r\nx-api-key: bench\r\ncontent-length: %d\r\n\r\n%s" % (port, len(body), body)
    )


async def _client(port: int, request: bytes, until: float, count: int | None, latencies: list, errors: list) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    done = 0
    try:
        while (count is None and time.perf_counter() < until) or (count is not None and done < count):
            start = time.perf_counter()
            writer.write(request)
            try:
                status = await _read_response(reader)
            except (asyncio.IncompleteReadError, ConnectionError) as e:
                errors.append(repr(e))
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                continue
            if status != 200:
                errors.append(status)
            latencies.append(time.perf_counter() - start)
            done += 1
    finally:
        writer.close()


async def measure(port: int, stream: bool, clients: int, seconds: float = 0.0, count: int | None = None) -> dict:
    latencies: list[float] = []
    errors: list = []
    request = _request_bytes(port, stream)
    await asyncio.gather(*(_client(port, request, 0, 20, [], []) for _ in range(clients)))  # warm up
    start = time.perf_counter()
    await asyncio.gather(*(_client(port, request, start + seconds, count, latencies, errors) for _ in range(clients)))
    elapsed = time.perf_counter() - start
    latencies.sort()
    return {
        "n": len(latencies),
        "errors": len(errors),
        "rps": len(latencies) / elapsed,
        "p50": statistics.median(latencies) * 1000,
        "p99": latencies[int(len(latencies) * 0.99) - 1] * 1000,
    }


# ----------------------------------------------------------------- the run


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--delay-ms", type=float, default=20.0, help="upstream time to first byte (default 20)")
    ap.add_argument("--requests", type=int, default=300, help="sequential requests for the 1-client latency")
    ap.add_argument("--seconds", type=float, default=5.0, help="duration of each concurrent run")
    ap.add_argument("--workers", type=int, default=1, help="drivetrain serve --workers")
    ap.add_argument("--upstream", type=int, help=argparse.SUPPRESS)  # internal: run as the upstream on this port
    args = ap.parse_args()
    if args.upstream:
        return run_upstream(args.upstream, args.delay_ms)

    up_port, serve_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "DRIVETRAIN_"))}
    env |= {"ANTHROPIC_BASE_URL": f"http://127.0.0.1:{up_port}", "ANTHROPIC_API_KEY": "sk-bench"}
    drivetrain = str(Path(sys.executable).parent / "drivetrain")
    procs = [
        subprocess.Popen([sys.executable, __file__, "--upstream", str(up_port), "--delay-ms", str(args.delay_ms)]),
        subprocess.Popen(
            [
                drivetrain,
                "serve",
                "--provider",
                "anthropic",
                "--model",
                "claude-bench",
                "--quiet",
                "--port",
                str(serve_port),
                "--workers",
                str(args.workers),
            ],
            env=env,
            stderr=subprocess.DEVNULL,
        ),
    ]
    try:
        wait_port(up_port)
        wait_port(serve_port)
        print(
            f"upstream: time to first byte {args.delay_ms:g} ms; serve: {args.workers} worker(s); "
            f"{os.cpu_count()} CPUs shared by all three processes"
        )
        print("\none client, sequential (p50 latency):")
        for stream in (False, True):
            direct = asyncio.run(measure(up_port, stream, 1, count=args.requests))
            via = asyncio.run(measure(serve_port, stream, 1, count=args.requests))
            kind = "streaming" if stream else "JSON     "
            print(
                f"  {kind}  direct {direct['p50']:6.2f} ms   through serve {via['p50']:6.2f} ms   "
                f"ratio {via['p50'] / direct['p50']:.2f}x   (+{via['p50'] - direct['p50']:.2f} ms)"
            )
        print("\nconcurrent clients, streaming, through serve (direct in brackets):")
        for clients in (16, 64):
            direct = asyncio.run(measure(up_port, True, clients, seconds=args.seconds))
            via = asyncio.run(measure(serve_port, True, clients, seconds=args.seconds))
            print(
                f"  {clients:3d} clients  {via['rps']:7.0f} req/s  p50 {via['p50']:6.1f} ms  p99 {via['p99']:6.1f} ms  "
                f"errors {via['errors']}   [direct {direct['rps']:.0f} req/s, p99 {direct['p99']:.1f} ms]"
            )
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)


if __name__ == "__main__":
    main()
