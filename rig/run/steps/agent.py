"""Step 2, agent: the harness in the workspace."""

from pathlib import Path

from harnesses.protocol import HarnessAdapter
from rig.run.steps.attempt import Attempt
from rig.schema import AgentRun


def agent(attempt: Attempt, *, adapter: HarnessAdapter, workdir: Path) -> AgentRun:
    """Run the harness on the attempt's task in `workdir` under its condition, its logs and session
    in the attempt folder; every process it started is gone when this returns.

    The experiment's wall timeout applies, or else the task's own.
    """
    task = attempt.task
    timeout_s = attempt.experiment.timeouts.agent_s or task.spec.timeout_s
    return adapter.run(workdir, task.spec.prompt, attempt.condition, attempt.folder, timeout_s)
