"""``drivetrain serve``: the configured model as an Anthropic Messages and an OpenAI chat-completions endpoint."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Protocol, runtime_checkable
from urllib.parse import urlsplit

from drivetrain.errors import ConfigError, HarnessError
from drivetrain.jsontypes import JsonObject
from drivetrain.models.base import Model
from drivetrain.models.resolve import PROVIDERS, resolve_model

if TYPE_CHECKING:
    from drivetrain.serve.state import ServeState

KEY_VAR = "DRIVETRAIN_SERVE_API_KEY"
_WORKER_VAR = "DRIVETRAIN_SERVE_WORKER"  # the settings a --workers process builds its app from


@runtime_checkable
class _Loaded(Protocol):
    """The local model: its weights are loaded in this process, once."""

    def load(self) -> None: ...


@runtime_checkable
class _Remote(Protocol):
    """A model behind an HTTP API."""

    base_url: str


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="drivetrain serve",
        description="Serve the model as POST /v1/messages (Anthropic) and POST /v1/chat/completions (OpenAI), "
        "plus GET /v1/models, GET /health and GET /metrics. Then: ANTHROPIC_BASE_URL=http://127.0.0.1:8080 "
        f"drivetrain -p ..., or OPENAI_BASE_URL=http://127.0.0.1:8080/v1. With {KEY_VAR} set, every "
        "request must carry that key (x-api-key or Authorization: Bearer).",
    )
    p.add_argument(
        "--provider",
        choices=PROVIDERS,
        default=None,
        help="default: anthropic if ANTHROPIC_* is set, openai if OPENAI_* is set, else local",
    )
    p.add_argument("--model", default=None)
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help=f"address to listen on (default 127.0.0.1); any other needs an API key ({KEY_VAR})",
    )
    p.add_argument("--port", type=int, default=8080, help="default 8080; 0 picks a free port")
    p.add_argument(
        "--api-key-file", default=None, help=f"read the API key clients must send from this file (instead of {KEY_VAR})"
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes serving the port (HTTP providers only: the local model is one per process)",
    )
    p.add_argument(
        "--max-concurrent",
        type=int,
        default=None,
        help="model calls at once per process (default: 1 for the local model, 256 otherwise)",
    )
    p.add_argument("--max-queue", type=int, default=64, help="requests waiting for the model before 429 (default 64)")
    p.add_argument("--max-body-mb", type=float, default=32, help="largest request body, in MB (default 32)")
    p.add_argument("--grace", type=float, default=30, help="seconds in-flight requests get to finish on shutdown")
    p.add_argument("--quiet", action="store_true", help="no request log on stderr")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[2:] if argv is None else argv)
    from drivetrain.serve.server import bind, is_loopback, stderr_log

    try:
        key = api_key(args.api_key_file)
        if key is None and not is_loopback(args.host):
            raise ConfigError(
                f"refusing to listen on {args.host} without an API key: anyone who can reach it could "
                f"use the model and spend what stands behind it. Set {KEY_VAR} (or --api-key-file), "
                "or keep --host 127.0.0.1."
            )
        model = resolve_model(args.provider, args.model)
        _refuse_loop_to_self(model, args.host, args.port)
        if args.workers > 1 and isinstance(model, _Loaded):
            raise ConfigError(
                "--workers: the local model is one llama.cpp instance per process, and requests share "
                "its KV cache by taking turns at it; serve it with one worker."
            )
        if isinstance(model, _Loaded):  # the local model: load the weights now, not on the first request
            stderr_log(f"loading {model.name} …")
            model.load()
    except (HarnessError, OSError) as e:
        print(f"drivetrain serve: {e}", file=sys.stderr)
        return 1
    try:
        sock = bind(args.host, args.port)
    except OSError as e:
        print(f"drivetrain serve: cannot listen on {args.host}:{args.port}: {e.strerror or e}", file=sys.stderr)
        return 1
    host = f"[{args.host}]" if ":" in args.host else args.host
    url, shown_key = f"http://{host}:{sock.getsockname()[1]}", "$" + KEY_VAR if key else "unused"
    stderr_log(
        f"serving {model.name} on {url}  (Ctrl-C to stop)\n"
        f"  Anthropic clients: ANTHROPIC_BASE_URL={url} ANTHROPIC_API_KEY={shown_key}\n"
        f"  OpenAI clients:    OPENAI_BASE_URL={url}/v1 OPENAI_API_KEY={shown_key}"
    )
    options = {
        "provider": args.provider,
        "model": args.model,
        "host": args.host,
        "api_key_file": args.api_key_file,
        "max_concurrent": args.max_concurrent,
        "max_queue": args.max_queue,
        "max_body": int(args.max_body_mb * 1024 * 1024),
        "quiet": args.quiet,
    }
    if args.workers > 1:
        from drivetrain.serve.server import serve_workers

        os.environ[_WORKER_VAR] = json.dumps(options)
        serve_workers(worker_state, sock, args.workers, args.grace)
    else:
        from drivetrain.serve.server import serve_forever

        serve_forever(_state(model, options, key), sock, args.grace)
    stderr_log("stopped.")
    return 0


def api_key(path: str | None) -> str | None:
    """The key clients must send: the file's first line, else $DRIVETRAIN_SERVE_API_KEY; None if neither."""
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                key = f.readline().strip()
        except OSError as e:
            raise ConfigError(f"--api-key-file {path}: {e.strerror or e}") from None
        if not key:
            raise ConfigError(f"--api-key-file {path} is empty")
        return key
    return os.environ.get(KEY_VAR, "").strip() or None


def _state(model: Model, options: JsonObject, key: str | None) -> ServeState:
    from drivetrain.cli.telemetry import active_telemetry
    from drivetrain.serve.server import stderr_log
    from drivetrain.serve.state import ServeState, Settings

    installed = active_telemetry()  # the main command started it (``TRACED``); not in a --workers process
    tracer = installed.tracer_provider.get_tracer("drivetrain") if installed and installed.tracer_provider else None
    return ServeState(
        model,
        Settings(
            host=options["host"],
            api_key=key,
            max_body=options["max_body"],
            max_concurrent=options["max_concurrent"],
            max_queue=options["max_queue"],
            log=None if options["quiet"] else stderr_log,
        ),
        tracer=tracer,
    )


def worker_state() -> ServeState:
    """The state of one ``--workers`` process: the same settings, its own model client and counters."""
    options = json.loads(os.environ[_WORKER_VAR])
    return _state(resolve_model(options["provider"], options["model"]), options, api_key(options["api_key_file"]))


def _refuse_loop_to_self(model: object, host: str, port: int) -> None:
    """ANTHROPIC_BASE_URL exported for clients of this server would make it its own backend, recursing forever."""
    base_url = model.base_url if isinstance(model, _Remote) else None
    if not isinstance(base_url, str) or not port:
        return
    parts = urlsplit(base_url)
    from drivetrain.serve.server import is_loopback

    same_host = parts.hostname == host or (
        is_loopback(parts.hostname or "") and (is_loopback(host) or host in ("0.0.0.0", "::"))
    )
    if same_host and (parts.port or (443 if parts.scheme == "https" else 80)) == port:
        raise ConfigError(
            f"the model's base URL {base_url} is this server itself ({host}:{port}), so every request "
            "would call itself. Unset ANTHROPIC_BASE_URL / OPENAI_BASE_URL for `drivetrain serve`, "
            "or choose the provider with --provider."
        )
