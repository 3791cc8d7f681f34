"""A scripted model server: the Anthropic Messages API on 127.0.0.1, for testing agents offline.

Each request gets the next step of the script, as JSON or, when the request has
``"stream": true``, as the real SSE event stream. The server is strict: it checks
every request against the rules the real API enforces (tool_use answered by
exactly one tool_result, results first, no empty text, …), answers a broken one
with 400 ``invalid_request_error``, and ``assert_complete()`` (run on leaving the
``with`` block) fails on any violation, any call after the script ran out, or any
step left unused::

    import anthropic
    from drivetrain.testing import ScriptedServer, reply, respond, tool_call

    steps = [
        respond([tool_call("Read", {"file_path": "a.py"})]),  # stop_reason "tool_use"
        reply("42.", expect=lambda body: len(body["messages"]) == 3),  # raise or return False to fail
    ]
    with ScriptedServer(steps) as server:
        client = anthropic.Anthropic(base_url=server.url, api_key="test")
        ...                       # or ANTHROPIC_BASE_URL=server.url for a subprocess
        server.requests[0].body   # every request: .method .path .headers .body

Concurrent runs each get their own script: ``ScriptedServer({"prompt one": [...], "prompt two": [...]})``
routes every request by its first user message's text (or by ``route=lambda body: ...``) and records it
in ``Request.conversation``; a pause_turn step is for a single script only.

Other steps: ``http_error(529, "overloaded_error", "busy", {"retry-after": "0"})``,
``raw_response(200, {"choices": []})``. ``delay=`` waits before answering;
``stall_after_events=`` stalls a stream mid-way (idle-timeout tests) and
``error_after_events=`` ends it with an ``error`` event; ``hold=`` (a ``threading.Event``)
keeps the answer until the test sets it. ``Request.events_sent`` and ``.answered`` say how far an
answer got. Upstream faults (``drivetrain.testing.faults``, one kind per row of docs/faults.md):
``fault("cut")`` as a step, or ``ScriptedServer(steps, faults=FaultSchedule(rate=0.05, seed=1))`` to fault
requests at a seeded rate without using steps; ``Request.fault`` and ``.usage`` say what each got and billed.
``count_tokens`` is answered without using a step; any other endpoint is a 404 and fails ``assert_complete``.

``ScriptedOpenAIServer`` serves the same steps as OpenAI chat completions
(``POST /v1/chat/completions``, JSON or ``chat.completion.chunk`` SSE ending in
``data: [DONE]``), checking requests by the chat rules (``validate_chat``): every
assistant ``tool_calls`` id answered by a ``tool`` message before the next
assistant or user message, ``model`` and ``messages`` present, …::

    with ScriptedOpenAIServer([respond([tool_call("Read", {"file_path": "a.py"})]), reply("done")]) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="test")

``tool_call("Read", '{"file_path": ')`` sends those raw (here malformed) arguments.

``usage`` is computed, not made up: tokens are four bytes of each block's JSON, and the server simulates
the prompt cache (``cache_control`` breakpoints written and read, ``cache_creation_input_tokens`` /
``cache_read_input_tokens``), see ``drivetrain.testing.cache``; ``server.cache`` holds what was written.
"""

from drivetrain.models.anthropic_wire import validate

from .cache import PromptCache, count_tokens
from .chat import ScriptedOpenAIServer, validate_chat
from .faults import FAULT_KINDS, SERVED, Fault, FaultKind, FaultSchedule, fault
from .script import (
    RawResponse,
    Respond,
    Step,
    http_error,
    raw_response,
    reply,
    respond,
    server_tool_use,
    text,
    thinking,
    tool_call,
)
from .server import Headers, Request, ScriptedServer, first_prompt

__all__ = [
    "FAULT_KINDS",
    "SERVED",
    "Fault",
    "FaultKind",
    "FaultSchedule",
    "Headers",
    "PromptCache",
    "RawResponse",
    "Request",
    "Respond",
    "ScriptedOpenAIServer",
    "ScriptedServer",
    "Step",
    "count_tokens",
    "fault",
    "first_prompt",
    "http_error",
    "raw_response",
    "reply",
    "respond",
    "server_tool_use",
    "text",
    "thinking",
    "tool_call",
    "validate",
    "validate_chat",
]
