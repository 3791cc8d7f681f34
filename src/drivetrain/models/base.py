"""The Model seam: one async method from a request to an assistant message.

Every provider (Anthropic, OpenAI-compatible, local llama.cpp, the scripted test
server) sits behind this, so the loop cannot tell them apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeAlias, runtime_checkable

from drivetrain.jsontypes import JsonObject
from drivetrain.messages import Block, Message, StopReason, Usage

# "auto": text or calls; "any": the reply must call a tool; "none": it must not.
ToolChoice: TypeAlias = Literal["auto", "any", "none"]


@dataclass(frozen=True)
class ModelRequest:
    messages: list[Message]
    system: str = ""
    tools: list[JsonObject] = field(default_factory=list)  # Anthropic `tools` entries
    max_tokens: int = 8192
    stop_sequences: list[str] = field(default_factory=list)
    temperature: float | None = None  # None: the provider's default
    # The sampling seed, for providers that take one (local; OpenAI-compatible servers): None, the provider's own.
    seed: int | None = None
    tool_choice: ToolChoice | None = None  # None: the provider's default, "auto"
    # A GBNF grammar the whole reply must follow, for providers that can constrain decoding (local).
    grammar: str | None = None
    # Called with each piece of streamed text as it arrives; optional.
    on_text: Callable[[str], None] | None = None
    # Keep the KV state of the fixed prompt prefix (the system turn) across processes, for providers that can (local).
    keep_prefix: bool = False


@dataclass(frozen=True)
class ModelResponse:
    content: tuple[Block, ...]
    stop_reason: StopReason
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    id: str = ""

    @property
    def message(self) -> Message:
        return Message("assistant", self.content)


@runtime_checkable
class Model(Protocol):
    name: str

    async def respond(self, request: ModelRequest) -> ModelResponse: ...
