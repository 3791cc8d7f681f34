"""A small HTTP/1.1 client for passthrough: keep-alive connections to one origin, one write per request.

Measured under serve, httpx (httpx2 with these SDKs) spent ~2 ms of CPU on each upstream exchange (anyio,
h11, its models), more than all of serve's own work, which capped a gateway at a few hundred requests a
second. Passthrough needs very little of it: POST to one URL, read a status and headers, relay the body
as it comes. So this does that on asyncio streams, and serve uses httpx only where this does not reach:
an upstream behind a proxy (``HTTPS_PROXY`` & co.).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncGenerator
from urllib.parse import urlsplit


class LeanResponse:
    """The parts of an ``httpx.Response`` passthrough uses: status_code, headers, aread, aiter_raw, aclose."""

    def __init__(
        self,
        pool: LeanPool,
        status: int,
        headers: dict[str, str],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        idle: float,
    ):
        self.status_code, self.headers = status, headers
        self._pool, self._reader, self._idle = pool, reader, idle
        self._writer: asyncio.StreamWriter | None = writer  # None once closed or given back
        self._complete = False
        length = headers.get("content-length")
        self._chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        self._left = int(length) if length is not None and not self._chunked else None
        self._until_close = self._left is None and not self._chunked

    async def aiter_raw(self) -> AsyncGenerator[bytes, None]:
        """The body as it arrives (chunked framing removed)."""
        read = self._reader
        async with asyncio.timeout(None) as deadline:
            while True:
                deadline.reschedule(asyncio.get_running_loop().time() + self._idle)  # an idle timeout, per read
                if self._chunked:
                    size = int((await read.readuntil(b"\r\n")).split(b";")[0], 16)
                    if size == 0:
                        await read.readuntil(b"\r\n")  # no trailers are sent by the APIs served
                        break
                    data = await read.readexactly(size + 2)
                    yield data[:-2]
                elif self._left is not None:
                    if self._left == 0:
                        break
                    data = await read.read(min(self._left, 65536))
                    if not data:
                        raise ConnectionError("the upstream closed the connection mid-answer")
                    self._left -= len(data)
                    yield data
                else:  # delimited by the connection's end
                    data = await read.read(65536)
                    if not data:
                        break
                    yield data
        self._complete = not self._until_close and self.headers.get("connection", "").lower() != "close"

    async def aread(self) -> bytes:
        return b"".join([chunk async for chunk in self.aiter_raw()])

    async def aclose(self) -> None:
        if self._writer is None:
            return
        if self._complete:
            self._pool.give_back(self._reader, self._writer)
        else:  # not read to its end (a client that left): the connection cannot carry another request
            self._writer.close()
        self._writer = None


class LeanPool:
    """Keep-alive connections to the origin of ``url``, reused last-in first-out (the warmest first)."""

    def __init__(self, url: str, *, connect_timeout: float, idle_timeout: float, max_idle: int = 128):
        parts = urlsplit(url)
        self.host, self.path = parts.hostname or "localhost", parts.path or "/"
        self.tls = parts.scheme == "https"
        self.port = parts.port or (443 if self.tls else 80)
        self.authority = parts.netloc.rpartition("@")[2]
        self.connect_timeout, self.idle_timeout, self.max_idle = connect_timeout, idle_timeout, max_idle
        self._ssl = ssl.create_default_context() if self.tls else None
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> LeanResponse:
        head = [f"POST {path} HTTP/1.1", f"host: {self.authority}", f"content-length: {len(body)}"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        request = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        while self._idle:  # a kept connection the server may have closed meanwhile: on failure, the next
            reader, writer = self._idle.pop()
            try:
                return await self._exchange(reader, writer, request)
            except (ConnectionError, asyncio.IncompleteReadError):
                writer.close()
        async with asyncio.timeout(self.connect_timeout):
            reader, writer = await asyncio.open_connection(self.host, self.port, ssl=self._ssl, limit=1 << 20)
        return await self._exchange(reader, writer, request)

    async def _exchange(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
    ) -> LeanResponse:
        writer.write(request)
        async with asyncio.timeout(self.idle_timeout):
            head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        return LeanResponse(self, status, headers, reader, writer, self.idle_timeout)

    def give_back(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._idle) < self.max_idle and not writer.is_closing():
            self._idle.append((reader, writer))
        else:
            writer.close()

    async def aclose(self) -> None:
        for _, writer in self._idle:
            writer.close()
        self._idle.clear()
