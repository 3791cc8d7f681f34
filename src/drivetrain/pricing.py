"""Prices in USD per million tokens, and context windows, per model.

A model whose price is not known costs ``None``, never 0 and never a guess: its tokens are still counted. The
table holds only published prices; every model the installed ``anthropic`` and ``openai`` SDKs name is either in
it or in ``UNPRICED`` (a test checks, so a new SDK release shows up as a failing test, not as a wrong cost).

Names match exactly, or as a dated snapshot of a priced name (``claude-sonnet-4-5-20250929``,
``gpt-4.1-2025-04-14``) unless the snapshot is listed by itself. ``local/…`` (the embedded model) costs 0.

Settings add or change entries (``set_prices``; the CLI passes the settings files' ``"pricing"`` sections)::

    {"pricing": {"my-model": {"input": 1.0, "output": 2.0, "cache_write": 1.25, "cache_read": 0.1,
                              "context_window": 128000}}}

Fields given for a model the table knows replace just those fields (``{"context_window": 1000000}`` alone is
fine); a price needs all four of input, output, cache_write and cache_read.

The price table is process-wide: one CLI process, one project's settings.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Protocol, TypedDict, runtime_checkable

from drivetrain.errors import ConfigError
from drivetrain.jsontypes import JsonObject
from drivetrain.messages import Usage

PRICE_FIELDS = ("input", "output", "cache_write", "cache_read")


@dataclass(frozen=True)
class Price:
    """USD per million tokens. cache_write is Anthropic's 5-minute cache write (OpenAI: the input price, as
    OpenAI bills no write premium); cache_read is a cached input token."""

    input: float | None = None
    output: float | None = None
    cache_write: float | None = None
    cache_read: float | None = None
    context_window: int | None = None

    @property
    def priced(self) -> bool:
        return all(getattr(self, f) is not None for f in PRICE_FIELDS)

    def cost_usd(self, usage: Usage) -> float | None:
        per_in, per_out, per_write, per_read = self.input, self.output, self.cache_write, self.cache_read
        if per_in is None or per_out is None or per_write is None or per_read is None:  # not priced
            return None
        total = (
            usage.input_tokens * per_in
            + usage.output_tokens * per_out
            + usage.cache_creation_input_tokens * per_write
            + usage.cache_read_input_tokens * per_read
        )
        return round(total / 1_000_000, 6)


def _table(*rows: tuple[tuple[str, ...], Price]) -> dict[str, Price]:
    return {name: price for names, price in rows for name in names}


# Anthropic: cache write = 1.25 × input, cache read = 0.1 × input. (Sonnet 4/4.5 requests over 200k input tokens,
# with the 1M-context beta, bill at a higher rate that this table does not model.)
_OPUS_OLD = Price(15.0, 75.0, 18.75, 1.50, 200_000)
_OPUS_45 = Price(5.0, 25.0, 6.25, 0.50, 200_000)
_SONNET = Price(3.0, 15.0, 3.75, 0.30, 200_000)
ANTHROPIC = _table(
    (("claude-opus-4-6", "claude-opus-4-5", "claude-opus-4-5-20251101"), _OPUS_45),
    (
        (
            "claude-opus-4-1",
            "claude-opus-4-1-20250805",
            "claude-opus-4-0",
            "claude-opus-4-20250514",
            "claude-3-opus-latest",
            "claude-3-opus-20240229",
        ),
        _OPUS_OLD,
    ),
    (
        (
            "claude-sonnet-4-6",
            "claude-sonnet-4-5",
            "claude-sonnet-4-5-20250929",
            "claude-sonnet-4-0",
            "claude-sonnet-4-20250514",
            "claude-3-7-sonnet-latest",
            "claude-3-7-sonnet-20250219",
            "claude-3-5-sonnet-latest",
            "claude-3-5-sonnet-20241022",
            "claude-3-5-sonnet-20240620",
        ),
        _SONNET,
    ),
    (("claude-haiku-4-5", "claude-haiku-4-5-20251001"), Price(1.0, 5.0, 1.25, 0.10, 200_000)),
    (("claude-3-5-haiku-latest", "claude-3-5-haiku-20241022"), Price(0.80, 4.0, 1.0, 0.08, 200_000)),
    (("claude-3-haiku-20240307",), Price(0.25, 1.25, 0.30, 0.03, 200_000)),
)


def _openai(inp: float, out: float, cached: float | None, window: int) -> Price:
    # no cache-write premium; a model without prompt caching bills a cached token as a plain one
    return Price(inp, out, inp, inp if cached is None else cached, window)


OPENAI = _table(
    (("gpt-5", "gpt-5-codex", "gpt-5.1", "gpt-5.1-codex"), _openai(1.25, 10.0, 0.125, 400_000)),
    (("gpt-5-chat-latest", "gpt-5.1-chat-latest"), _openai(1.25, 10.0, 0.125, 128_000)),
    (("gpt-5-mini",), _openai(0.25, 2.0, 0.025, 400_000)),
    (("gpt-5-nano",), _openai(0.05, 0.40, 0.005, 400_000)),
    (("gpt-4.1",), _openai(2.0, 8.0, 0.50, 1_047_576)),
    (("gpt-4.1-mini",), _openai(0.40, 1.60, 0.10, 1_047_576)),
    (("gpt-4.1-nano",), _openai(0.10, 0.40, 0.025, 1_047_576)),
    (("gpt-4o", "gpt-4o-2024-08-06", "gpt-4o-2024-11-20"), _openai(2.50, 10.0, 1.25, 128_000)),
    (("gpt-4o-2024-05-13",), _openai(5.0, 15.0, None, 128_000)),
    (("gpt-4o-mini",), _openai(0.15, 0.60, 0.075, 128_000)),
    (("o3",), _openai(2.0, 8.0, 0.50, 200_000)),
    (("o4-mini",), _openai(1.10, 4.40, 0.275, 200_000)),
    (("o3-mini",), _openai(1.10, 4.40, 0.55, 200_000)),
    (("o1",), _openai(15.0, 60.0, 7.50, 200_000)),
    (
        ("gpt-4-turbo", "gpt-4-turbo-2024-04-09", "gpt-4-turbo-preview", "gpt-4-0125-preview", "gpt-4-1106-preview"),
        _openai(10.0, 30.0, None, 128_000),
    ),
    (("gpt-4", "gpt-4-0613", "gpt-4-0314"), _openai(30.0, 60.0, None, 8_192)),
    (("gpt-4-32k", "gpt-4-32k-0613", "gpt-4-32k-0314"), _openai(60.0, 120.0, None, 32_768)),
    (("gpt-3.5-turbo", "gpt-3.5-turbo-0125"), _openai(0.50, 1.50, None, 16_385)),
)

PRICES: dict[str, Price] = {**ANTHROPIC, **OPENAI}

# Named by the installed SDKs, but with no published price this table is sure of: they report tokens and a null
# cost. Move a name to PRICES once its price is known (or give it in settings).
UNPRICED: frozenset[str] = frozenset(
    {
        # anthropic 2.14
        "claude-fable-5",
        "claude-fable-5-1",
        "claude-fable-5-2",
        "claude-haiku-5-5",
        "claude-mythos-5",
        "claude-mythos-5-1",
        "claude-mythos-5-2",
        "claude-mythos-preview",
        "claude-opus-4-7",
        "claude-opus-4-8",
        "claude-opus-5",
        "claude-opus-5-5",
        "claude-sonnet-5",
        "claude-sonnet-5-5",
        # openai 3.57: newer than this table, audio/search previews (audio tokens bill differently), retired snapshots
        "gpt-6-astra",
        "gpt-6.2-astra",
        "gpt-6.2-astra-law",
        "gpt-6.1-sol",
        "gpt-6.2-sol",
        "gpt-6.1-terra",
        "gpt-6-sol",
        "gpt-6-luna",
        "gpt-6-cyber",
        "gpt-6-rosalind",
        "gpt-5.6-sol",
        "gpt-5.6-terra",
        "gpt-5.6-luna",
        "gpt-5.6-cyber",
        "gpt-5.5",
        "gpt-5.5-2026-04-23",
        "gpt-5.5-pro",
        "gpt-5.5-pro-2026-04-23",
        "gpt-5.4",
        "gpt-5.4-mini",
        "gpt-5.4-nano",
        "gpt-5.4-mini-2026-03-17",
        "gpt-5.4-nano-2026-03-17",
        "gpt-5.3-chat-latest",
        "gpt-5.2",
        "gpt-5.2-2025-12-11",
        "gpt-5.2-chat-latest",
        "gpt-5.2-pro",
        "gpt-5.2-pro-2025-12-11",
        "gpt-5.1-mini",
        "gpt-5.1-codex-max",
        "gpt-5-pro",
        "gpt-5-pro-2025-10-06",
        "gpt-daybreak-blue-latest",
        "gpt-daybreak-red-latest",
        "gpt-rosalind-research",
        "o1-preview",
        "o1-preview-2024-09-12",
        "o1-mini",
        "o1-mini-2024-09-12",
        "o1-pro",
        "o1-pro-2025-03-19",
        "o3-pro",
        "o3-pro-2025-06-10",
        "o3-deep-research",
        "o3-deep-research-2025-06-26",
        "o4-mini-deep-research",
        "o4-mini-deep-research-2025-06-26",
        "computer-use-preview",
        "computer-use-preview-2025-03-11",
        "codex-mini-latest",
        "chatgpt-4o-latest",
        "gpt-audio-mini",
        "gpt-audio-mini-2025-12-15",
        "gpt-4o-audio-preview",
        "gpt-4o-audio-preview-2024-10-01",
        "gpt-4o-audio-preview-2024-12-17",
        "gpt-4o-audio-preview-2025-06-03",
        "gpt-4o-mini-audio-preview",
        "gpt-4o-mini-audio-preview-2024-12-17",
        "gpt-4o-search-preview",
        "gpt-4o-mini-search-preview",
        "gpt-4o-search-preview-2025-03-11",
        "gpt-4o-mini-search-preview-2025-03-11",
        "gpt-4-vision-preview",
        "gpt-3.5-turbo-16k",
        "gpt-3.5-turbo-0301",
        "gpt-3.5-turbo-0613",
        "gpt-3.5-turbo-1106",
        "gpt-3.5-turbo-16k-0613",
        # openai 3.60: newer than this table
        "gpt-6-astra-healthcare",
        "gpt-6.1-sol-healthcare",
        "gpt-6.2-astra-healthcare",
        "gpt-6.2-sol-healthcare",
    }
)

FREE_PREFIXES = ("local/",)  # the embedded model runs on this machine
_DATED = re.compile(r"-(\d{8}|\d{4}-\d{2}-\d{2})$")

_overrides: dict[str, Price] = {}  # from settings (set_prices)


def price(model: str) -> Price | None:
    """What the table (with the settings' entries over it) knows of ``model``; None if nothing."""
    names = [model]
    if model not in UNPRICED and (undated := _DATED.sub("", model)) != model:
        names.append(undated)
    for name in names:
        base, extra = PRICES.get(name), _overrides.get(name)
        if extra is not None:
            return _merge(base, extra)
        if base is not None:
            return base
    if model.startswith(FREE_PREFIXES):
        free, extra = Price(0.0, 0.0, 0.0, 0.0), _overrides.get(model)
        return free if extra is None else _merge(free, extra)
    return None


def cost_usd(model: str, usage: Usage) -> float | None:
    """USD for ``usage`` (cache writes and reads at their own prices); None when the price is not known."""
    p = price(model)
    return None if p is None else p.cost_usd(usage)


def context_window(model: str) -> int | None:
    p = price(model)
    return None if p is None else p.context_window


def set_prices(entries: Mapping[str, Price]) -> None:
    """Replace the settings' entries (an entry's None fields keep the table's values)."""
    _overrides.clear()
    _overrides.update(entries)


def _merge(base: Price | None, extra: Price) -> Price:
    if base is None:
        return extra
    given = {f.name: getattr(extra, f.name) for f in fields(Price)}
    return replace(base, **{k: v for k, v in given.items() if v is not None})


def prices_from_settings(files: Iterable[tuple[Path, JsonObject]]) -> dict[str, Price]:
    """The ``"pricing"`` sections of the settings files, most specific file first (as ``Settings.raw`` holds
    them): for each model, each field from the most specific file that gives it. Raises ConfigError naming the
    file for a malformed entry, or a model left with only part of a price."""
    out: dict[str, Price] = {}
    for path, data in reversed(list(files)):  # least specific first, so more specific files win
        section = data.get("pricing", {})
        if not isinstance(section, dict):
            raise ConfigError(
                f'In {path}: "pricing" must be an object like {{"my-model": {{"input": 1.0, '
                f'"output": 2.0, "cache_write": 1.25, "cache_read": 0.1, "context_window": 128000}}}}'
            )
        for model, entry in section.items():
            out[model] = _merge(out.get(model), _entry(path, model, entry))
    for model, entry in out.items():
        merged = _merge(PRICES.get(model), entry)
        if any(getattr(merged, f) is not None for f in PRICE_FIELDS) and not merged.priced:
            missing = [f for f in PRICE_FIELDS if getattr(merged, f) is None]
            raise ConfigError(
                f"pricing for {model!r} in the settings files lacks {', '.join(missing)}: give all of "
                f"{', '.join(PRICE_FIELDS)} (USD per million tokens)"
            )
    return out


def _entry(path: Path, model: str, entry: object) -> Price:
    known = (*PRICE_FIELDS, "context_window")
    if not isinstance(entry, dict) or set(entry) - set(known):
        raise ConfigError(f"In {path}: pricing[{model!r}] must be an object with keys among {', '.join(known)}")
    for key, value in entry.items():
        ok = (
            isinstance(value, int) and value > 0
            if key == "context_window"
            else isinstance(value, (int, float)) and value >= 0
        )
        if isinstance(value, bool) or not ok:
            raise ConfigError(
                f"In {path}: pricing[{model!r}].{key} must be a "
                f"{'positive integer' if key == 'context_window' else 'number ≥ 0'}, not {value!r}"
            )

    def usd(key: str) -> float | None:
        return float(entry[key]) if key in entry else None

    return Price(usd("input"), usd("output"), usd("cache_write"), usd("cache_read"), entry.get("context_window"))


def sdk_models() -> set[str]:
    """Every model name the installed anthropic and openai SDKs spell out in their types."""
    import anthropic.types
    import openai.types.shared

    def literals(t: object) -> set[str]:
        return {a for a in typing.get_args(t) if isinstance(a, str)} | {
            s for a in typing.get_args(t) if not isinstance(a, str) for s in literals(a)
        }

    return set().union(
        *(
            literals(t)
            for t in (
                anthropic.types.Model,
                anthropic.types.ModelParam,
                openai.types.shared.ChatModel,
                openai.types.shared.AllModels,
            )
        )
    )


class TurnUsage(TypedDict):
    model: str
    usage: dict[str, int]
    context_tokens: int
    context_window: int | None
    cost_usd: float | None


def turn_usage(model: str, usage: Usage) -> TurnUsage:
    """One model response's accounting, as the stream-json ``turn_usage`` event carries it. The context is what
    the request sent: input plus cache writes plus cache reads."""
    ctx = usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens
    return {
        "model": model,
        "usage": usage.to_wire(),
        "context_tokens": ctx,
        "context_window": context_window(model),
        "cost_usd": cost_usd(model, usage),
    }


def usage_line(t: TurnUsage) -> str:
    """``in 1,234 (+5,000 cached, +2,000 cache write) out 87  ctx 8,234/200,000  $0.0140`` for the turn log."""
    u = t["usage"]
    cache = [
        f"+{n:,} {what}"
        for n, what in ((u["cache_read_input_tokens"], "cached"), (u["cache_creation_input_tokens"], "cache write"))
        if n
    ]
    window = f"/{t['context_window']:,}" if t.get("context_window") else ""
    return (
        f"in {u['input_tokens']:,}{' (' + ', '.join(cache) + ')' if cache else ''} out {u['output_tokens']:,}"
        f"  ctx {t['context_tokens']:,}{window}  {format_usd(t['cost_usd'])}"
    )


def format_usd(cost: float | None) -> str:
    if cost is None:
        return "cost unknown"
    return f"${cost:.4f}" if cost == 0 or cost >= 0.0001 else "$<0.0001"


# ---------------------------------------------------------------- context windows

# Context windows in tokens, by longest name prefix; a model not listed gets its provider's default.
# The price table's windows come first (context_window); this is the fallback for models it lacks.
WINDOWS: dict[str, int] = {
    "claude-": 200_000,  # every Claude model (1M for some only with a beta header drivetrain does not send)
    "gpt-4o": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-5": 400_000,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
}
DEFAULT_WINDOW = {"anthropic": 200_000, "openai": 128_000}


def known_window(model: str, provider: str = "anthropic") -> int:
    """The price table's window for the model, else this table's by prefix, else the provider's default."""
    if window := context_window(model):
        return window
    match = max((p for p in WINDOWS if model.startswith(p)), key=len, default=None)
    return WINDOWS[match] if match is not None else DEFAULT_WINDOW.get(provider, 128_000)


class Named(Protocol):
    """A model, as far as this module needs to know (``models.base.Model`` is one)."""

    @property
    def name(self) -> str: ...


@runtime_checkable
class Windowed(Protocol):
    """A model that knows its context window (the API models, the local model)."""

    @property
    def context_window(self) -> int | None: ...


@runtime_checkable
class LlamaSized(Protocol):
    """llama.cpp's own model, whose window is its ``n_ctx``."""

    @property
    def n_ctx(self) -> int: ...


@runtime_checkable
class Wrapper(Protocol):
    """A model wrapped around the real one (code-block actions, the screen's streaming)."""

    @property
    def inner(self) -> Named | None: ...


def window_of(model: Named) -> int:
    """The model's context window in tokens: its own ``context_window`` or llama.cpp ``n_ctx``, else the table."""
    while True:
        for value in (
            model.context_window if isinstance(model, Windowed) else None,
            model.n_ctx if isinstance(model, LlamaSized) else None,
        ):
            if isinstance(value, int) and value > 0:
                return value
        if not isinstance(model, Wrapper) or model.inner is None:
            break
        model = model.inner
    return known_window(model.name, "openai" if type(model).__name__.startswith("OpenAI") else "anthropic")
