"""A pack: its manifest (pack.toml), tasks, TOML loading, calibration pins, `pack new`, `pack stats`."""
