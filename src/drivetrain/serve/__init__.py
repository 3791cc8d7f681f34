"""``drivetrain serve``: the configured Model as an Anthropic Messages and an OpenAI chat-completions endpoint,
on uvicorn + starlette. Imported only by the ``serve`` command (and tests), never by ``import drivetrain``.

    with ModelServer(model) as server:   # 127.0.0.1, a free port
        anthropic.Anthropic(base_url=server.url, api_key="unused")
        openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
"""

from drivetrain.serve.server import ModelServer, is_loopback

__all__ = ["ModelServer", "is_loopback"]
