"""rig: a reproducible measurement rig for coding-agent harnesses."""

__version__ = "0.1.0"
