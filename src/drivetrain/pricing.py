"""Prices in USD per million tokens, for ``total_cost_usd``. Unknown models cost ``None``, not 0."""

from __future__ import annotations

from drivetrain.messages import Usage

# (input, output, cache write, cache read) per million tokens; matched by longest prefix
PRICES: dict[str, tuple[float, float, float, float]] = {
    "claude-opus-4-5": (5.0, 25.0, 6.25, 0.50),
    "claude-opus-4": (15.0, 75.0, 18.75, 1.50),
    "claude-sonnet-4": (3.0, 15.0, 3.75, 0.30),
    "claude-3-7-sonnet": (3.0, 15.0, 3.75, 0.30),
    "claude-3-5-sonnet": (3.0, 15.0, 3.75, 0.30),
    "claude-haiku-4-5": (1.0, 5.0, 1.25, 0.10),
    "claude-3-5-haiku": (0.80, 4.0, 1.0, 0.08),
    "claude-3-haiku": (0.25, 1.25, 0.30, 0.03),
    "gpt-4o-mini": (0.15, 0.60, 0.0, 0.075),
    "gpt-4o": (2.50, 10.0, 0.0, 1.25),
    "gpt-4.1-mini": (0.40, 1.60, 0.0, 0.10),
    "gpt-4.1": (2.0, 8.0, 0.0, 0.50),
    "local/": (0.0, 0.0, 0.0, 0.0),  # the embedded model runs on this machine
}


def cost_usd(model: str, usage: Usage) -> float | None:
    match = max((p for p in PRICES if model.startswith(p)), key=len, default=None)
    if match is None:
        return None
    inp, out, write, read = PRICES[match]
    total = (usage.input_tokens * inp + usage.output_tokens * out
             + usage.cache_creation_input_tokens * write + usage.cache_read_input_tokens * read)
    return round(total / 1_000_000, 6)
