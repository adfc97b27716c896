"""`python -m rig`: the rig command line, as the `rig` script runs it."""

from rig.cli import app

app(prog_name="rig")
