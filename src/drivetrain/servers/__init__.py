"""MCP servers: their configuration (``config``), the client that offers their tools (``client``, ``group``)."""
