"""Step 1, prepare: a fresh workspace for one attempt."""

import tempfile
from dataclasses import dataclass
from pathlib import Path

from rig.run.steps.attempt import WORK, Attempt, Trail
from rig.verify.checks import derive
from rig.workspace import protect
from rig.workspace.build import (
    RIG_GIT_DIR,
    WorkspaceError,
    apply_overlays,
    apply_patch,
    copy_fixture,
    init_baseline,
)


@dataclass(frozen=True)
class Prepared:
    """A workspace ready for the agent, in a directory of its own (`container`) beside the rig's
    private copy of its repository."""

    container: Path
    baseline: str
    """The baseline commit, pinned in the record."""
    snapshot: protect.Snapshot
    """The protected files before the agent ran."""

    @property
    def workdir(self) -> Path:
        """The agent's workspace."""
        return self.container / WORK

    @property
    def rig_git(self) -> Path:
        """The rig's own copy of the workspace's repository, which the agent cannot rewrite."""
        return self.container / RIG_GIT_DIR


def prepare(attempt: Attempt, *, trail: Trail) -> Prepared:
    """The fixture of the task's pack, its setup, the condition's overlays, the files the project
    environment derives (rig.verify.checks.derive) and the baseline, in a
    directory made now under `attempt.workspaces` for this attempt of its run; its protected files
    read before the agent runs.

    The directory goes on `trail.trees` as soon as it exists, the baseline on `trail.baseline`.
    """
    task, condition, runs = attempt.task, attempt.condition, attempt.workspaces
    runs.mkdir(parents=True, exist_ok=True)
    container = Path(tempfile.mkdtemp(prefix=f"{attempt.item.run_id}-a{attempt.number}-", dir=runs))
    trail.made(container)
    workdir = container / WORK
    copy_fixture(task.pack.fixture_dir, workdir)
    apply_patch(workdir, task.setup_patch)
    apply_overlays(workdir, condition.remove_files, condition.write_files)
    if attempt.project_env is not None:
        # The starting tree is the pack's own: its derived files are made outside any sandbox and
        # are part of the baseline, so the diff shows only what the agent changed.
        problem = derive(workdir, container / "derive-home", attempt.project_env)
        if problem is not None:
            raise WorkspaceError(f"the starting tree's {problem}; fix [environment] build in pack.toml")
    baseline = trail.baseline = init_baseline(
        workdir, container / RIG_GIT_DIR, everything=attempt.project_env is not None
    )
    snapshot = protect.snapshot(workdir, protect.rules_for(task.pack))
    return Prepared(container=container, baseline=baseline, snapshot=snapshot)
