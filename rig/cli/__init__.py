"""The `rig` command line, one module per command group; heavy imports stay inside the commands.

Importing a group registers its commands on the one application; the groups are imported in the
order `rig --help` lists them.
"""

from importlib import import_module

from rig.cli.main import app

GROUPS = (
    "demo",
    "init",
    "calibrate",
    "run",
    "packs",
    "env",
    "harness",
    "mock",
    "results",
    "imports",
    "power",
    "aa",
    "doctor",
)
for _group in GROUPS:
    import_module(f"rig.cli.{_group}")

__all__ = ["app"]
