"""ModelServer: one Model behind the Anthropic Messages and OpenAI chat-completions APIs.

The stdlib ThreadingHTTPServer answers requests on threads; the Model runs on one asyncio
event loop in a background thread (see ``exchange.Call``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable
from urllib.parse import unquote

from drivetrain.httpd import QuickHTTPServer
from drivetrain.models.base import Model
from drivetrain.serve import anthropic_api, openai_api
from drivetrain.serve.exchange import ClientGone, Exchange, HTTPError


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


Route = Callable[[Exchange], None]

ROUTES: dict[tuple[str, str], tuple[str, Route]] = {
    ("POST", "/v1/messages"): ("anthropic", anthropic_api.messages),
    ("POST", "/v1/messages/count_tokens"): ("anthropic", anthropic_api.count_tokens),
    ("POST", "/v1/chat/completions"): ("openai", openai_api.chat_completions),
    ("POST", "/chat/completions"): ("openai", openai_api.chat_completions),  # an OpenAI base URL set without /v1
}


class ModelServer:
    """Serve ``model`` on ``host:port`` (0: any free port) until ``close()``."""

    def __init__(self, model: Model, host: str = "127.0.0.1", port: int = 0, *,
                 log: Callable[[str], None] | None = None, commit_after: float = 5.0, keepalive_every: float = 10.0):
        self.model = model
        self.host, self.port = host, port
        self.commit_after, self.keepalive_every = commit_after, keepalive_every
        self._log = log
        self.loop = asyncio.new_event_loop()
        self._loop_thread: threading.Thread | None = None
        self._httpd: _HTTPServer | None = None
        self._http_thread: threading.Thread | None = None
        self.created = int(time.time())

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def log(self, line: str) -> None:
        if self._log is not None:
            self._log(line)

    def start(self) -> ModelServer:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        server_class = type("_HTTPServerFamily", (_HTTPServer,), {"address_family": family})
        self._httpd = server_class((self.host, self.port), _Handler)  # raises OSError if the port is taken
        self._httpd.owner = self
        self.port = self._httpd.server_address[1]
        self._loop_thread = threading.Thread(target=self.loop.run_forever, name="drivetrain-serve-model", daemon=True)
        self._loop_thread.start()
        self._http_thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                             name="drivetrain-serve-http", daemon=True)
        self._http_thread.start()
        return self

    def close(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._loop_thread is not None:
            async def cancel_all() -> None:
                tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

            asyncio.run_coroutine_threadsafe(cancel_all(), self.loop).result(timeout=5)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._loop_thread.join(timeout=5)
            self._loop_thread = None
            self.loop.close()

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- routing

    def route(self, method: str, path: str) -> tuple[str, Route | None]:
        """The dialect of the path ("" if neither API's) and its handler (None: no such endpoint)."""
        if (method, path) in ROUTES:
            return ROUTES[(method, path)]
        if method == "GET" and (path in ("/health", "/v1/models", "/models") or path.startswith(("/v1/models/", "/models/"))):
            return "", self._info
        return next((d for (_, p), (d, _) in ROUTES.items() if p == path), ""), None

    def _info(self, ex: Exchange) -> None:
        name = self.model.name
        entry = {"id": name, "object": "model", "created": self.created, "owned_by": "drivetrain",
                 "type": "model", "display_name": name,
                 "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.created))}
        if ex.path == "/health":
            ex.send_json({"status": "ok", "model": name})
        elif ex.path in ("/v1/models", "/models"):
            # both APIs' list shapes at once: OpenAI reads object/data, Anthropic data/has_more/first_id/last_id
            ex.send_json({"object": "list", "data": [entry], "has_more": False, "first_id": name, "last_id": name})
        elif (asked := unquote(ex.path.partition("/models/")[2])) == name:
            ex.send_json(entry)
        else:
            raise HTTPError(404, f"model {asked!r} not found; this server serves {name!r}", param="model")


class _HTTPServer(QuickHTTPServer):
    owner: ModelServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def _dispatch(self) -> None:
        owner = self.server.owner
        path = self.path.partition("?")[0].rstrip("/") or "/"
        dialect, route = owner.route(self.command, path)
        # unknown paths: Anthropic clients always send anthropic-version; anything else gets the OpenAI shape
        dialect = dialect or ("anthropic" if self.headers.get("anthropic-version") else "openai")
        ex = Exchange(self, owner, dialect, path)
        try:
            self._check_host()
            if route is None and any(p == path for _, p in ROUTES):
                raise HTTPError(405, f"{self.command} {path} is not allowed; use POST")
            if route is None:
                raise HTTPError(404, f"Not found: {self.command} {path}. This server answers POST /v1/messages, "
                                "POST /v1/chat/completions, GET /v1/models and GET /health.")
            route(ex)
        except HTTPError as e:
            self._answer_error(ex, e)
        except ClientGone:
            self.close_connection = True
        except OSError:  # the client went away mid-answer
            self.close_connection = True
        except Exception as e:  # a bug: a one-line answer for the client, the traceback on the server's stderr
            owner.log("".join(traceback.format_exception(e)).rstrip())
            self._answer_error(ex, HTTPError(500, f"internal error in drivetrain serve: {type(e).__name__}: {e}"))

    def _answer_error(self, ex: Exchange, e: HTTPError) -> None:
        if ex.committed:  # mid-answer: the status is out; all that is left is to hang up
            self.close_connection = True
            return
        try:
            ex.send_error(e)
        except OSError:
            self.close_connection = True

    def _check_host(self) -> None:
        """On a loopback address, answer only requests addressed to a loopback name (DNS-rebinding guard)."""
        if not is_loopback(self.server.owner.host):
            return
        host = (self.headers.get("host") or "localhost").strip()
        name = host[1:].partition("]")[0] if host.startswith("[") else host.rpartition(":")[0] or host
        if not is_loopback(name) and name != self.server.owner.host:
            raise HTTPError(403, f"Host {host!r} is not a loopback name; this server only answers requests "
                                 "addressed to 127.0.0.1 or localhost.")

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _dispatch

    def log_message(self, format: str, *args: Any) -> None:
        self.server.owner.log(f"{self.address_string()} {format % args}")


def stderr_log(line: str) -> None:
    print(f"drivetrain serve: {line}", file=sys.stderr, flush=True)
