"""Run in Phoenix's virtualenv by ``tests/phoenix_server.py``: reads a run's spans back with Phoenix's own client
(``phoenix.client``, the arize-phoenix-client package) and prints them as JSON.

    python phoenix_read.py URL SESSION_ID AT_LEAST TIMEOUT_S

The spans printed are those of the trace whose root span carries ``session.id`` = SESSION_ID, once Phoenix holds
AT_LEAST of them (it stores what it receives in batches), or whatever it holds after TIMEOUT_S.
"""

import importlib.util
import json
import sys
import time
import types

# The client (the arize-phoenix-client package) lives in the ``phoenix`` namespace, whose ``__init__`` (from the
# arize-phoenix package) imports the whole server: 9 s here, for nothing the client uses. So the namespace is made
# without running it, and the client imported from it, as it would be with the client package alone.
_namespace = types.ModuleType("phoenix")
_namespace.__path__ = list(importlib.util.find_spec("phoenix").submodule_search_locations)
sys.modules["phoenix"] = _namespace

from phoenix.client import Client  # noqa: E402


def trace_of(client: Client, session_id: str) -> list:
    roots = client.spans.get_spans(project_identifier="default", parent_id="null", limit=1000)
    trace_ids = [s["context"]["trace_id"] for s in roots if s["attributes"].get("session.id") == session_id]
    if not trace_ids:
        return []
    return client.spans.get_spans(project_identifier="default", trace_ids=trace_ids, limit=1000)


def main(url: str, session_id: str, at_least: str, timeout_s: str) -> None:
    client = Client(base_url=url)
    deadline = time.monotonic() + float(timeout_s)
    while len(spans := trace_of(client, session_id)) < int(at_least) and time.monotonic() < deadline:
        time.sleep(0.2)
    json.dump(spans, sys.stdout)


if __name__ == "__main__":
    main(*sys.argv[1:])
