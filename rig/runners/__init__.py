"""The runner kinds of hidden tests: each kind's command, its junit XML, and the registry."""
