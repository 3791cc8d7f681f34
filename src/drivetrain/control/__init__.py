"""Control over what the model may do: verdicts, the gate, hooks, permissions, sandbox, audit log."""
