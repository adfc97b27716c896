"""Scripted experiments with `[stopping]` for tests/test_sequential*.py, and `rig` run on them."""

import os
import subprocess
import sys
from pathlib import Path

RIG = str(Path(sys.executable).with_name("rig"))


def config(stopping: str, with_policy: str, tasks: str = '"all"', max_reps: int = 4) -> str:
    """An experiment: `without` does nothing, `with` follows `with_policy`; `stopping` is its tail."""
    return f"""harness = "scripted"
tasks = {tasks}
repetitions = {max_reps}
workers = 2
seed = 5
[timeouts]
agent_s = 60
stall_s = 30
{stopping}
[[conditions]]
name = "without"
harness_options = {{ policy = "nothing" }}
[[conditions]]
name = "with"
harness_options = {{ policy = "{with_policy}" }}
"""


def rig(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """`rig ARGS` with results and runs under tmp_path."""
    env = {
        **os.environ,
        "RIG_RESULTS_ROOT": str(tmp_path / "results"),
        "RIG_RUNS_ROOT": str(tmp_path / "runs"),
    }
    return subprocess.run([RIG, *args], capture_output=True, text=True, timeout=600, env=env)
