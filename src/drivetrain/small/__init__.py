"""The small profile: what the loop does for a small local model (code blocks, checks, prompts)."""
