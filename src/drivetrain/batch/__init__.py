"""Batch sweeps: many tasks, each an ordinary session in a scratch workspace, with their results in one file."""
