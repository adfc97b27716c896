"""`python -m rig.cli`: the rig command line, as the `rig` script runs it (`rig demo` runs its
steps so)."""

from rig.cli import app

app(prog_name="rig")
