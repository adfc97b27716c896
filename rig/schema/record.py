"""The verdicts after the agent (verification, protection, audit, sandbox) and the run record."""

import hashlib
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from rig.schema.agent import BudgetStop, Metrics, ModelUsage, NetworkOutcome, StreamStats
from rig.schema.experiment import Experiment

# --- Verdicts after the agent: verification, protected files, the audit, the sandbox --------------


class CheckOutcome(BaseModel):
    """The gate's verdict: its exit code, the stages that failed and each stage's problems."""

    exit_code: int | None
    ok: bool
    failed: list[str] = Field(default_factory=list)
    results: dict[str, list[str]] = Field(default_factory=dict)
    error: str | None = None


class HiddenOutcome(BaseModel):
    """The hidden tests' verdict; the rig's canary is verified, then left out of every field.

    exit_code: once the canary failed as it must, pytest's exit code for the hidden tests alone
    (the 1 the canary causes becomes 0 when no hidden test failed, 5 when none was collected);
    otherwise pytest's own exit code, None on a timeout. failed: hidden tests that failed or
    errored as `module::test` (a module's collection error as `module`), or one marker:
    <canary>, <crash>, <timeout>, <no tests collected>. skipped: hidden tests skipped or
    xfailed, which also makes the outcome not ok. A task judged by test (a mined one:
    rig.verify.judged) counts only its judged tests in these fields, a judged test missing from the
    report among the failed; `outside` counts the others.
    """

    exit_code: int | None
    ok: bool
    collected: int = 0
    outside: int = Field(
        default=0,
        description="tests of the hidden files outside the task (skipped or failing with the "
        "reference fix when it was mined): run, never judged",
    )
    failed: list[str] = Field(default_factory=list)
    skipped: list[str] = Field(default_factory=list)
    error: str | None = None
    passed: list[str] = Field(default_factory=list, exclude=True)
    """The hidden tests that passed. Never recorded (a run's record counts them): `rig task mine`
    reads it to name a fix's pass-to-pass tests."""
    problems: dict[str, str] = Field(default_factory=dict, exclude=True)
    """Each failed hidden test's failure text from the report. Never recorded (the junit report is
    kept as an artifact): `rig task mine` shows why a fix does not pass its own tests."""


class Verification(BaseModel):
    """Both verdicts of one workspace."""

    check: CheckOutcome
    hidden: HiddenOutcome | None

    @property
    def success(self) -> bool:
        """The gate passed and the hidden tests ran and passed."""
        return self.check.ok and self.hidden is not None and self.hidden.ok


class Tampering(BaseModel):
    modified: list[str] = Field(default_factory=list)
    added: list[str] = Field(default_factory=list)
    deleted: list[str] = Field(default_factory=list)

    @property
    def touched(self) -> list[str]:
        return sorted({*self.modified, *self.added, *self.deleted})


class AuditFinding(BaseModel):
    """One rule that fired after the agent, with the evidence."""

    rule: str
    detail: str


class SandboxStatus(BaseModel):
    """How one run's agent was confined: recorded in every run record."""

    mode: str
    active: bool
    backend: str | None = None
    detail: str | None = None
    processes: str | None = Field(
        default=None,
        description="what kept every process of the agent from outliving it: "
        "'bwrap-pidns', 'cgroup', 'pidns' or 'token-reaper' (None in records older than it)",
    )
    processes_detail: str | None = Field(
        default=None, description="the containment layers used, and why stronger ones were not"
    )

    def warning(self) -> str | None:
        """The warning every record of an unconfined run carries, None when confined."""
        if self.active:
            return None
        return (
            f"sandbox: the agent ran unconfined ({self.detail}); it could read and write any file; "
            f"its processes were contained by {self.processes}"
        )


# --- The run record: one line of runs.jsonl (or quarantine.jsonl) per attempt ---------------------
# Every field a reader may question is here with its evidence: the verdicts of the gate and the
# hidden tests, the tampering found, the agent's process outcome, the parsed metrics, the infra
# classification and the pins that say exactly what was measured. `rig schema` prints it.

# Bumped whenever a field is added or changes meaning; rig.store.migrate brings older records up to date.
RECORD_SCHEMA_VERSION = 12
# Infrastructure rules of attempts the agent's outcome did not decide (the rig failed, a disk it
# wrote to was full, or the Dask worker running it was lost or refused it): nothing to re-derive
# them from.
RIG_SIDE_RULES = frozenset({"rig_error", "disk_full", "worker_lost", "worker_refused"})


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
    budget: BudgetStop | None = Field(
        default=None, description="the run budget limit passed, when the rig stopped the agent there"
    )
    ended_after_final: bool = Field(
        default=False,
        description="the harness streamed its final answer, then stayed alive and silent for [timeouts] "
        "after_final_s: the rig ended it, and the run is scored on its work (schema 10)",
    )
    failed_requests: int | None = Field(
        default=None,
        description="the model requests that had failed in a row when the rig ended a harness that "
        "kept retrying them, as infrastructure; None: not ended for that (schema 11)",
    )


class Protected(BaseModel):
    modified: list[str] = Field(default_factory=list)
    added: list[str] = Field(default_factory=list)
    deleted: list[str] = Field(default_factory=list)
    restored: bool = True


class Pins(BaseModel):
    rig_version: str
    pack: str | None = Field(
        default=None, description="the task pack's name (None in records older than packs)"
    )
    pack_hash: str | None = Field(
        default=None, description="the pack's manifest, fixture, tasks and hidden tests"
    )
    fixture_hash: str = Field(description="the tree the workspace started from: the fixture, or its base")
    base_tree: str | None = Field(
        default=None, description="the git tree hash of the task's base (task.toml `base`); None: the fixture"
    )
    task_hash: str
    hidden_tests_hash: str
    harness_version: str
    python_version: str
    ruff_version: str
    pytest_version: str
    toolchain_hash: str | None = Field(
        default=None, description="the verifying interpreter's hooks and tools"
    )
    environment_hash: str | None = Field(
        default=None, description="the pack's project environment (rig/env/identity.py); None without one"
    )
    environment_packages: str | None = Field(
        default=None, description="sha256 of the project environment's installed package list"
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


# The formats `rig import` reads (rig.ingest): a record's `source.kind`.
SourceKind = Literal["inspect", "harbor", "atif", "table"]


class RecordSource(BaseModel):
    """Where an imported record came from: another tool's results, read by `rig import` (schema 12).
    A record this rig measured has none."""

    kind: SourceKind = Field(description="the format read: inspect, harbor, atif or table")
    file: str = Field(
        description="the file it was read from, as given on the command line (relative where possible)"
    )
    item: str = Field(
        description="what in that file it is: an Inspect sample and epoch, a Harbor trial's name, a "
        "trajectory's id, a table's row number (from 1, after the header)"
    )
    tool_version: str | None = Field(
        default=None,
        description="the tool that wrote the source, e.g. 'inspect_ai 0.3.285'; None where it does not say",
    )


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
        description="'rig_error', 'workspace_limits', 'audit', 'budget' (stopped at the run budget), "
        "'scope', the first failing gate stage, or 'hidden' / 'verify'"
    )
    check: CheckOutcome | None
    hidden: HiddenOutcome | None
    verify_error: str | None = None
    protected: Protected
    audit: list[AuditFinding] = Field(default_factory=list, description="rules that fired after the agent")
    sandbox: SandboxStatus | None = None
    network: NetworkOutcome | None = Field(
        default=None,
        description="the network policy and what the agent's connections did (None before schema 5)",
    )
    files_changed: list[str] = Field(default_factory=list)
    out_of_scope: list[str] | None = Field(
        default=None,
        description="changed files outside the task's scope, as files_changed names them "
        "(None: the task has no scope, the diff was not taken, or the record predates schema 7)",
    )
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
    worker: str | None = Field(
        default=None,
        description="the Dask worker that ran the attempt, as a stable hash of its host and name "
        "(None with the local executor)",
    )
    score: float | None = Field(
        default=None,
        description="partial credit in [0, 1], where the outcome is fractional (imported records); None "
        "for a binary outcome, `success` (schema 12)",
    )
    group: str | None = Field(
        default=None,
        description="a further stratum of the design, e.g. a harness-model configuration (imported "
        "records); None where there is none (schema 12)",
    )
    source: RecordSource | None = Field(
        default=None,
        description="where an imported record came from (`rig import`); None for a run this rig measured "
        "(schema 12)",
    )


# --- A foreign record: another tool's run, imported (`rig import`, rig.ingest) ----------------------
# It measured what its tool measured: no gate, no hidden tests, no agent process the rig watched, so
# it cannot be a RunRecord. It keeps a RunRecord's identifying fields, so every reader of runs.jsonl
# reads it alike, and says of every other figure whether the source reported it: None is "not
# reported", never 0.


class ForeignMetrics(BaseModel):
    """The usage a foreign source reports of one run; None: the source does not report the figure."""

    model: str | None = Field(default=None, description="the model the source says answered")
    input_tokens: int | None = Field(default=None, description="input tokens, cached ones excluded")
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None
    total_tokens: int | None = None
    cost_usd: float | None = None
    cost_source: str | None = Field(default=None, description="who priced it: the source's name")
    assistant_messages: int | None = None
    tool_calls: int | None = None
    tool_errors: int | None = None
    per_model: dict[str, ModelUsage] = Field(
        default_factory=dict, description="tokens and cost per model, where the source records them so"
    )


class ForeignPins(BaseModel):
    """What a foreign source pins of a run, where it records it (None: it does not). Named as in
    `Pins`, so `load_runs` checks them alike: a Harbor trial's task checksum is its `task_hash`; a
    trajectory `rig export` wrote carries the rig's own pins."""

    rig_version: str | None = None
    pack: str | None = None
    pack_hash: str | None = None
    fixture_hash: str | None = None
    base_tree: str | None = None
    task_hash: str | None = None
    hidden_tests_hash: str | None = None
    harness_version: str | None = None
    python_version: str | None = None
    ruff_version: str | None = None
    pytest_version: str | None = None
    toolchain_hash: str | None = None
    environment_hash: str | None = None
    environment_packages: str | None = None
    baseline_commit: str | None = None
    source_revision: str | None = Field(
        default=None, description="the source's own code revision (Inspect: the eval's git commit)"
    )
    task_version: str | None = Field(default=None, description="the source's task version (Inspect)")


class ForeignRecord(BaseModel):
    """One imported run (a line of runs.jsonl, or of quarantine.jsonl when infrastructure) of a
    results folder `rig import` wrote (schema 12)."""

    record_schema: int = RECORD_SCHEMA_VERSION
    experiment: str
    run_id: str = Field(description="stable across imports: a hash of the source kind and the run's cell")
    attempt: int = 1
    task: str
    hypothesis: str = ""
    condition: str
    repetition: int = Field(description="from 1: the Inspect epoch, else the run's rank in its cell")
    harness: str | None = Field(description="the agent or solver the source names")
    harness_version: str | None = None
    model: str | None = None
    success: bool = Field(description="the outcome: full credit (score 1) where the outcome is fractional")
    score: float | None = Field(
        default=None, description="partial credit in [0, 1]; None where every outcome of the import is 0 or 1"
    )
    group: str | None = Field(default=None, description="a further stratum (a harness-model configuration)")
    failing_stage: None = Field(default=None, description="always None: the source has no gate stages")
    wall_s: float | None = Field(default=None, description="None where the source records no times")
    started_at: datetime | None = None
    finished_at: datetime | None = None
    metrics: ForeignMetrics = Field(default_factory=ForeignMetrics)
    pins: ForeignPins = Field(default_factory=ForeignPins)
    infra: InfraVerdict = Field(default_factory=InfraVerdict)
    artifacts: str = Field(default="", description="always empty: the source's files stay where they are")
    source: RecordSource


class WorkerJob(BaseModel):
    """What a Dask worker is sent to run an experiment's plan items: the design and what the
    coordinator pinned, which the worker's own pins must equal. No secret: a real provider's key is
    read from the worker's own environment."""

    experiment: Experiment
    tasks: list[str]
    pins: dict[str, Pins]
    sandbox: SandboxStatus
    sandbox_mode: str

    def digest(self) -> str:
        """Identifies the job: a worker builds its run context once per job."""
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()
