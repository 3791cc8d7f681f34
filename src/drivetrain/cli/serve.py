"""``drivetrain serve``: the configured model as an Anthropic Messages and an OpenAI chat-completions endpoint."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from urllib.parse import urlsplit

from drivetrain.errors import ConfigError, HarnessError
from drivetrain.models.resolve import PROVIDERS, resolve_model
from drivetrain.serve.server import ModelServer, is_loopback, stderr_log


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="drivetrain serve",
        description="Serve the model as POST /v1/messages (Anthropic) and POST /v1/chat/completions (OpenAI), "
                    "plus GET /v1/models and GET /health. Then: ANTHROPIC_BASE_URL=http://127.0.0.1:8080 "
                    "drivetrain -p ..., or OPENAI_BASE_URL=http://127.0.0.1:8080/v1.")
    p.add_argument("--provider", choices=PROVIDERS, default=None,
                   help="default: anthropic if ANTHROPIC_* is set, openai if OPENAI_* is set, else local")
    p.add_argument("--model", default=None)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; there is no authentication, so keep it on loopback)")
    p.add_argument("--port", type=int, default=8080, help="default 8080; 0 picks a free port")
    p.add_argument("--quiet", action="store_true", help="no request log on stderr")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[2:] if argv is None else argv)
    try:
        model = resolve_model(args.provider, args.model)
        _refuse_loop_to_self(model, args.host, args.port)
        load = getattr(model, "load", None)  # the local model: load the weights now, not on the first request
        if callable(load):
            stderr_log(f"loading {model.name} …")
            load()
    except HarnessError as e:
        print(f"drivetrain serve: {e}", file=sys.stderr)
        return 1
    server = ModelServer(model, args.host, args.port, log=None if args.quiet else stderr_log)
    try:
        server.start()
    except OSError as e:
        print(f"drivetrain serve: cannot listen on {args.host}:{args.port}: {e.strerror or e}", file=sys.stderr)
        return 1
    if not is_loopback(args.host):
        _warn_exposed(args.host)
    stderr_log(f"serving {model.name} on {server.url}  (Ctrl-C to stop)\n"
               f"  Anthropic clients: ANTHROPIC_BASE_URL={server.url} ANTHROPIC_API_KEY=unused\n"
               f"  OpenAI clients:    OPENAI_BASE_URL={server.url}/v1 OPENAI_API_KEY=unused")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    stderr_log("stopped.")
    return 0


def _warn_exposed(host: str) -> None:
    bar = "!" * 78
    print(f"{bar}\n"
          f"drivetrain serve: WARNING: listening on {host}, which is NOT a loopback address.\n"
          "  There is no authentication: anyone who can reach this address can use the model,\n"
          "  and spend whatever API credit or compute stands behind it. Prefer --host 127.0.0.1\n"
          "  (the default) and an SSH tunnel or an authenticating reverse proxy.\n"
          f"{bar}", file=sys.stderr, flush=True)


def _refuse_loop_to_self(model: object, host: str, port: int) -> None:
    """ANTHROPIC_BASE_URL exported for clients of this server would make it its own backend, recursing forever."""
    base_url = getattr(model, "base_url", None)
    if not isinstance(base_url, str) or not port:
        return
    parts = urlsplit(base_url)
    same_host = parts.hostname == host or (is_loopback(parts.hostname or "") and (is_loopback(host) or host in ("0.0.0.0", "::")))
    if same_host and (parts.port or (443 if parts.scheme == "https" else 80)) == port:
        raise ConfigError(f"the model's base URL {base_url} is this server itself ({host}:{port}), so every request "
                          "would call itself. Unset ANTHROPIC_BASE_URL / OPENAI_BASE_URL for `drivetrain serve`, "
                          "or choose the provider with --provider.")
