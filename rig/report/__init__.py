"""`rig report`: report.md and its tables, the figures, failures.md, in a worker process where it can."""
