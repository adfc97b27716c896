"""What every step of a run shares: which attempt it is, and the trail the attempt leaves as it goes."""

import os
import threading
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from rig.confine.project_env import ProjectEnv
from rig.confine.untrusted import remove
from rig.run.leftovers import claim, release
from rig.schema import (
    Condition,
    Experiment,
    Metrics,
    NetworkOutcome,
    Pins,
    PlanItem,
    SandboxStatus,
    Task,
    WorkspaceStats,
)
from rig.workspace.scratch import Scratch

# A diagnostic switch: `RIG_INJECT_FAULT=<step>` raises inside that step of every run, to prove
# that any exception in a run becomes that run's record (tests/test_hostile.py).
INJECT_FAULT_VAR = "RIG_INJECT_FAULT"
# The folder of a workspace and of the rig's copy of it, each inside a directory of its own.
WORK = "work"


class InjectedFault(RuntimeError):
    """Raised where RIG_INJECT_FAULT names the current step."""


class Interrupted(RuntimeError):
    """Raised at the next step of a run once its experiment is interrupted."""


@dataclass(frozen=True)
class Attempt:
    """One attempt of a plan item: which run it is, what the experiment pins for it, where its
    artifacts go (`folder`, and `artifacts`, the same folder relative to the results folder), where
    its workspace and the rig's copy of it are made, and what its agent must not read."""

    experiment: Experiment
    item: PlanItem
    task: Task
    condition: Condition
    pins: Pins
    sandbox: SandboxStatus
    number: int
    folder: Path
    artifacts: str
    started: datetime
    workspaces: Path
    """The folder the attempt's workspace is made in (and a copy with no room in memory)."""
    scratch: Scratch
    """Where the rig's copy of the workspace is made."""
    secrets: list[Path]
    """What the agent must not read (the answers, the judge, the results): the audit looks for them."""
    network: NetworkOutcome | None = None
    """The network policy as enforced before the agent ran; the agent's own run holds what it did."""
    project_env: ProjectEnv | None = None
    """The pack's project environment: the agent's, the tree's derived files' and verification's."""

    def warnings(self) -> list[str]:
        """What every record of this attempt warns of: an unconfined sandbox or network."""
        network = self.network.warning() if self.network else None
        return [w for w in (self.sandbox.warning(), network) if w]


@dataclass
class Trail:
    """What an attempt has reached, kept however a later step fails: the step it is in, the trees
    it made (removed when it ends), its warnings, and the parts of its record known so far.

    Steps add to it as soon as they know something, not when they return, so that the record of
    an attempt that failed halfway through a step still says what that step had found.
    """

    stopping: threading.Event | None = None
    """Set when the experiment is interrupted: the attempt ends at its next step."""
    step: str = "prepare"
    trees: list[Path] = field(default_factory=list)
    claims: dict[Path, int] = field(default_factory=dict)
    """The runner's claim (rig.run.leftovers) on each tree, held until the attempt ends."""
    warnings: list[str] = field(default_factory=list)
    baseline: str | None = None
    metrics: Metrics = field(default_factory=Metrics)
    workspace: WorkspaceStats | None = None

    def made(self, tree: Path) -> None:
        """`tree` was just made for this attempt: claimed by this runner, removed when it ends."""
        self.trees.append(tree)
        self.claims[tree] = claim(tree)

    def dropped(self, tree: Path) -> None:
        """`tree` was removed before the attempt ended."""
        self.trees.remove(tree)
        release(tree, self.claims.pop(tree), kept=False)

    def release(self, kept: bool) -> None:
        """End the claims on the attempt's trees (`kept`: they stay, and are not stale)."""
        for tree, fd in self.claims.items():
            release(tree, fd, kept)
        self.claims.clear()

    def enter(self, step: str) -> None:
        """Begin `step`: raises Interrupted once the experiment stops, InjectedFault where asked to."""
        self.step = step
        if self.stopping is not None and self.stopping.is_set():
            raise Interrupted(f"experiment interrupted before step {step!r}")
        if os.environ.get(INJECT_FAULT_VAR) == step:
            raise InjectedFault(f"fault injected in step {step!r} ({INJECT_FAULT_VAR})")


def write_artifact(path: Path, text: str) -> None:
    """Write one of the rig's own files in an attempt folder the agent could write into.

    Whatever the agent left at that name (a forged file, a symlink to elsewhere) is replaced, never
    followed.
    """
    remove(path)
    path.write_text(text)
