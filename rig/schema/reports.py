"""What the rig's commands report: calibrate, calibrate --harness, mining, doctor, status, pack stats."""

from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from rig.schema.pack import Expectation, Task

# --- What the rig's commands report: calibrate, calibrate --harness, doctor, status, reclassify ----

ItemKind = Literal["clean", "baseline", "solution", "leak", "decoy", "fixture"]


class Item(BaseModel):
    """One calibration item: which patches make the workspace, and what must happen."""

    name: str
    kind: ItemKind
    task: Task | None = None
    patches: list[Path] = Field(default_factory=list)
    expect: Expectation | None = None


class ItemResult(BaseModel):
    name: str
    kind: ItemKind
    task: str | None
    passed: bool
    reason: str
    check_failed: list[str] = Field(default_factory=list)
    hidden_failed: list[str] = Field(default_factory=list)
    wall_s: float = 0.0
    reused: bool = Field(
        default=False,
        description="judged on the verification rig task mine made of exactly the same inputs, not run again",
    )


class CalibrationReport(BaseModel):
    ok: bool
    passed: int
    failed: int
    items: list[ItemResult]


class CalibratedTask(BaseModel):
    task_hash: str
    hidden_tests_hash: str


class CalibrationPins(BaseModel):
    """What `rig calibrate` proved, by content hash: `rig run`'s preflight refuses a pack changed since."""

    pack: str
    root: str
    fixture_hash: str
    tasks: dict[str, CalibratedTask] = Field(default_factory=dict)
    calibrated_at: datetime
    rig_version: str


# Why `rig task mine` made a task of a commit, or did not.
MineVerdict = Literal[
    "mined",
    "merge",
    "root",
    "outside",
    "no-tests",
    "no-source",
    "protected",
    "generated",
    "conflict",
    "environment",
    "hidden-clash",
    "no-message",
    "already-mined",
    "no-fail-to-pass",
    "solution-fails",
    "flaky",
    "calibration",
    "error",
]


# How far a commit got through `rig task mine`, in the order the steps check it: read; its change
# has source and test files the pack allows; its reverse applied (or its fix, at its parent); its
# hidden tests kept their verdicts over every run of the fixed code; they all pass there; some
# fail before the fix, the same in every run; its message says something; the task made of it
# passed calibration; it was moved into the pack.
FunnelStage = Literal[
    "read",
    "changes",
    "applied",
    "not_flaky",
    "passed_after",
    "failed_before",
    "described",
    "calibrated",
    "kept",
]
FUNNEL_STAGES: tuple[FunnelStage, ...] = FunnelStage.__args__


class MinedCommit(BaseModel):
    """One commit `rig task mine` looked at: the task made of it, or why none was."""

    commit: str
    subject: str
    verdict: MineVerdict
    reason: str
    stage: FunnelStage = Field(
        default="read", description="the last step of mining it passed (MineFunnel, in that order)"
    )
    base: Literal["snapshot", "parent"] | None = Field(
        default=None, description="where its fix applied: reversed on the snapshot, or at its own parent"
    )
    seconds: float = Field(
        default=0.0, description="how long measuring it took (its calibration not included)"
    )
    task: str | None = None
    fail_to_pass: list[str] = Field(default_factory=list)
    pass_to_pass: list[str] = Field(default_factory=list)
    decoys: list[str] = Field(default_factory=list)
    earlier: bool = Field(
        default=False,
        description="its verdict is an earlier run's, from the pack's mined.jsonl, for the same inputs: "
        "not measured again",
    )
    inputs: str = Field(
        default="", description="the digest of what decides its verdict (rig.mine.miner.inputs_digest)"
    )


class MineFunnel(BaseModel):
    """How many of the commits read passed each step of mining, in the order they are checked: every
    count is at most the one before it, and each commit that stopped says why (its verdict)."""

    read: int
    changes: int = Field(description="changed source and test files, none generated or protected")
    applied: int = Field(description="their reverse applied to the snapshot, or they start at their parent")
    not_flaky: int = Field(description="their hidden tests gave one verdict over every run of the fixed code")
    passed_after: int = Field(description="the fix passed its hidden tests and the gate")
    failed_before: int = Field(description="some hidden test failed before the fix, the same in every run")
    described: int = Field(description="their message said something once files and tests were left out")
    calibrated: int = Field(description="the task made of them passed calibration")
    kept: int = Field(description="the task was moved into the pack")
    at_parent: int = Field(default=0, description="of those applied, how many start at their fix's parent")
    lost: dict[str, int] = Field(
        default_factory=dict,
        description="how many commits made no task, by verdict (each loss's reason), most first",
    )

    @classmethod
    def of(cls, commits: list[MinedCommit]) -> "MineFunnel":
        """The funnel of these commits, from the last step each one passed."""
        reached = [FUNNEL_STAGES.index(entry.stage) for entry in commits]
        counts = {stage: sum(at >= n for at in reached) for n, stage in enumerate(FUNNEL_STAGES)}
        applied = FUNNEL_STAGES.index("applied")
        parent = sum(at >= applied and e.base == "parent" for at, e in zip(reached, commits, strict=True))
        lost = Counter(entry.verdict for entry in commits if entry.verdict != "mined")
        return cls(
            **counts, at_parent=parent, lost=dict(sorted(lost.items(), key=lambda kv: (-kv[1], kv[0])))
        )


class MineReport(BaseModel):
    """What `rig task mine` did: every commit looked at, in history order (newest first), and how
    many passed each step."""

    pack: str
    snapshot: str
    commits: list[MinedCommit]
    funnel: MineFunnel
    calibration_reused: int = Field(
        default=0,
        description="calibration items of the tasks made judged on mining's own verification of them",
    )
    calibration_afresh: int = Field(
        default=0, description="calibration items verified again: their files differ from what was measured"
    )


class HarnessCheck(BaseModel):
    harness: str
    name: str
    passed: bool
    reason: str


class Protection(BaseModel):
    """One protection: whether it is active here, and what it does or why it is not."""

    name: str
    active: bool
    detail: str


class Cell(BaseModel):
    task: str
    condition: str
    planned: int = 0
    done: int = 0
    successes: int = 0
    pending: int = 0
    quarantined: int = 0
    infra_reruns: int = 0
    not_needed: int = Field(default=0, description="runs never started: the [stopping] rule had decided")


class TaskStats(BaseModel):
    """One task across the conditions: scored runs, successes, and whether it discriminated."""

    task: str
    runs: dict[str, int]
    successes: dict[str, int]
    flag: str | None

    def rate(self, condition: str) -> float | None:
        """The success rate under `condition`, or None before any scored run."""
        runs = self.runs.get(condition, 0)
        return self.successes.get(condition, 0) / runs if runs else None


class Change(BaseModel):
    run_id: str
    attempt: int
    source: str
    old_rule: str | None
    new_rule: str | None
    metrics_changed: bool
