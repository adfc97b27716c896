"""Scripted experiments with `[stopping]` for tests/test_sequential*.py, and `rig` run on them."""

import os
import subprocess
import sys
from pathlib import Path

RIG = str(Path(sys.executable).with_name("rig"))


# The five tasks of the built-in pack these designs were sized for (t7_cleanup_tmp came later).
FIVE_TASKS = '["t1_fix_pagination", "t2_add_endpoint", "t3_fix_check", "t4_split_constant", "t5_migration"]'


def config(stopping: str, with_policy: str, tasks: str = FIVE_TASKS, max_reps: int = 4) -> str:
    """An experiment: `without` does nothing, `with` follows `with_policy`; `stopping` is its tail."""
    return f"""harness = "scripted"
tasks = {tasks}
repetitions = {max_reps}
workers = 2
seed = 5
# [stopping] decides about the tasks run: the comparisons answer the same question.
estimand = "these_tasks"
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
