"""Subagents: the ``Task`` tool runs a child loop for a well-scoped part of a task and returns its answer."""
