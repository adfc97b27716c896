"""Step 2, agent: the harness in the workspace."""

from pathlib import Path

from harnesses.protocol import HarnessAdapter
from rig.schema import AgentRun, Condition, Task


def agent(
    adapter: HarnessAdapter,
    workdir: Path,
    task: Task,
    condition: Condition,
    folder: Path,
    timeout_s: int | None,
) -> AgentRun:
    """Run the harness on `task` in `workdir` under `condition`, its logs and session in the attempt
    `folder`; every process it started is gone when this returns.

    `timeout_s` is the experiment's wall timeout; None for the task's own.
    """
    return adapter.run(workdir, task.spec.prompt, condition, folder, timeout_s or task.spec.timeout_s)
