"""The run record: one line of runs.jsonl (or quarantine.jsonl) per attempt.

Every field a reader may question is here with its evidence: the verdicts of check.py and the
hidden tests, the tampering found, the agent's process outcome, the parsed metrics, the infra
classification and the pins that say exactly what was measured.
"""

from datetime import datetime

from pydantic import BaseModel, Field

from harnesses.base import Metrics
from rig.audit import AuditFinding
from rig.sandbox import SandboxStatus
from rig.streams import StreamStats
from rig.verify import CheckOutcome, HiddenOutcome

# Bumped whenever a field is added or changes meaning; rig.migrate brings older records up to date.
RECORD_SCHEMA_VERSION = 2


class InfraVerdict(BaseModel):
    is_infra: bool = False
    rule: str | None = Field(default=None, description="the classification rule that fired")
    detail: str | None = None


class AgentOutcome(BaseModel):
    command: list[str]
    exit_code: int | None
    timed_out: bool
    stalled: bool
    wall_s: float
    leftover_processes: int = Field(default=0, description="agent processes alive after it exited, killed")
    removed_links: list[str] = Field(default_factory=list, description="symlinks out of the attempt folder")
    streams: dict[str, StreamStats] = Field(default_factory=dict, description="bytes per stream, kept or not")
    sandboxed: bool = False
    processes: str | None = Field(
        default=None,
        description="what contained the agent's processes: bwrap-pidns, cgroup, pidns or token-reaper",
    )


class Protected(BaseModel):
    modified: list[str] = Field(default_factory=list)
    added: list[str] = Field(default_factory=list)
    deleted: list[str] = Field(default_factory=list)
    restored: bool = True


class Pins(BaseModel):
    rig_version: str
    fixture_hash: str
    task_hash: str
    hidden_tests_hash: str
    harness_version: str
    python_version: str
    ruff_version: str
    pytest_version: str
    toolchain_hash: str | None = Field(
        default=None, description="the verifying interpreter's hooks and tools"
    )
    baseline_commit: str | None = None


class WorkspaceStats(BaseModel):
    """What the agent left in the workspace, as the rig's bounded walk found it."""

    files: int = Field(default=0, description="non-directory entries: files, symlinks, special files")
    dirs: int = 0
    depth: int = Field(default=0, description="deepest directory level below the workspace root")
    excluded: dict[str, int] = Field(
        default_factory=dict, description="entries under build and cache trees (counted, never diffed)"
    )
    special: list[str] = Field(default_factory=list, description="FIFOs, sockets and devices: never opened")
    outward_links: list[str] = Field(
        default_factory=list, description="symlinks leading out of the workspace: never followed or copied"
    )
    limit: str | None = Field(default=None, description="the [limits] bound exceeded, with the numbers")


class RunRecord(BaseModel):
    record_schema: int = RECORD_SCHEMA_VERSION
    experiment: str
    run_id: str
    attempt: int
    task: str
    hypothesis: str
    condition: str
    repetition: int
    harness: str
    harness_version: str
    model: str | None
    thinking: str | None
    condition_mapping: str | None = Field(
        default=None, description="how the harness realised the condition, e.g. AGENTS.md via CLAUDE.md"
    )
    started_at: datetime
    finished_at: datetime
    wall_s: float
    exit_code: int | None
    timed_out: bool
    stalled: bool
    hang: str | None = Field(
        default=None,
        description="'agent_hang' (silence while a tool call ran) or 'timeout': the agent's own failure",
    )
    success: bool
    failing_stage: str | None = Field(
        description="'rig_error', 'workspace_limits', 'audit', the first failing check.py stage, "
        "or 'hidden' / 'verify'"
    )
    check: CheckOutcome | None
    hidden: HiddenOutcome | None
    verify_error: str | None = None
    protected: Protected
    audit: list[AuditFinding] = Field(default_factory=list, description="rules that fired after the agent")
    sandbox: SandboxStatus | None = None
    files_changed: list[str] = Field(default_factory=list)
    workspace: WorkspaceStats | None = None
    rig_error: str | None = Field(
        default=None, description="an exception inside the rig during this attempt; traceback.txt holds it"
    )
    agent: AgentOutcome
    metrics: Metrics
    infra: InfraVerdict
    pins: Pins
    artifacts: str = Field(description="the attempt's artifact folder, relative to the results folder")
    warnings: list[str] = Field(default_factory=list)
