"""Sessions: the append-only log of a run, the stores that keep it, rewind, and reports of it."""
