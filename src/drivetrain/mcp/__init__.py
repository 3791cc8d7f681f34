"""MCP: the servers drivetrain uses (their configuration, ``config``; the client that offers their tools, ``client``,
``group``) and ``mcp serve``, drivetrain's own tools offered to another agent (``serve``)."""
