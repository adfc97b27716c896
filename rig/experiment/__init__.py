"""An experiment: loading its TOML, its plan, its status, what it will cost and has spent."""
