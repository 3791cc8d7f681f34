"""The agent loop: its states, the step that moves a run from one to the next, and the parts each step uses."""
