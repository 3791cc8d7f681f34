"""Where commands and files meet the host: child processes and their environment, the bubblewrap sandbox, paths
and writes confined to the workspace."""
