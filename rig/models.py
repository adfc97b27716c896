"""The schema: every pydantic model that crosses a file boundary, and the defaults its fields need.

Experiment configs, tasks, what an agent run produced, the verdicts, the run record (one line of
runs.jsonl or quarantine.jsonl) and the reports of the rig's commands. This module imports
nothing else of the project, so the engine, the adapters, verification, the audit and the store
all import their models from here and the models import none of them (import-linter checks it,
see pyproject.toml). Behaviour that needs more than the standard library (loading a task,
checking a harness name against the registry) lives in the module that owns it.
"""

import hashlib
import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

# --- Defaults of the bounds on an agent: experiment [timeouts] and [limits] start from these ------

# An exact npm version: a range would let two runs of one condition install different CLIs.
EXACT_VERSION = r"^\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$"
DEFAULT_STALL_S = 420.0
# No file an agent writes needs more; a bound keeps a runaway agent from filling the disk.
DEFAULT_FILE_BYTES = 2 * 1024 * 1024 * 1024
DEFAULT_HEAD_BYTES = 64 * 1024 * 1024
DEFAULT_TAIL_BYTES = 4 * 1024 * 1024
# The tail lives in the runner's memory, once per stream and worker: its bound keeps the runner small.
MAX_TAIL_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_ENTRIES = 100_000
DEFAULT_MAX_DEPTH = 64

# --- Packs: a project with its tasks, described by pack.toml (loaded by rig.packs) ----------------

PACK_NAME = r"^[a-z0-9][a-z0-9_.-]*$"


class GateSpec(BaseModel):
    """The project's gate: a command run in the workspace whose exit code decides.

    `run` is what the rig runs; `{python}` is the rig's interpreter (pinned pytest and ruff), `{node}`
    the node that runs the harnesses. With `report = "json"` the last line of its stdout is
    `{"ok": bool, "failed": [stage, ...], "results": {stage: [problem, ...]}}`, cross-checked against
    the exit code; with `"exit-code"` only the exit code counts and a failure is stage `gate`.
    """

    model_config = ConfigDict(extra="forbid")
    command: list[str] = Field(
        min_length=1, description="the gate as the project's docs tell a person to run it, e.g. npm run check"
    )
    run: list[str] = Field(min_length=1, description="what the rig runs to decide")
    report: Literal["json", "exit-code"] = "json"
    stages: list[str] = Field(default_factory=list, description="the JSON report's stages, in fixing order")
    scripts: list[str] = Field(
        default_factory=list,
        description="gate script files: running one by path or interpreter runs the gate",
    )
    timeout_s: float | None = Field(
        default=None, gt=0, description="default: the experiment's timeouts.check_s"
    )


RunnerKind = Literal["pytest", "node-test", "command"]


class RunnerSpec(BaseModel):
    """How the hidden tests run: a built-in runner, or a command that writes junit XML.

    pytest: the rig's interpreter, the workspace's configuration ignored, `plugins` loaded with -p.
    node-test: `node --test` with its junit reporter; each hidden file wraps its tests in one
    top-level describe() named after the file's stem, so a test's id is `<stem>::<test>`.
    command: `command` with `{junit}` (where to write the report) and `{tests}` (the copied hidden
    tests folder) filled in; a test's id is `<classname>::<name>`. No canaries: the pack's own runner
    must be trusted.
    """

    model_config = ConfigDict(extra="forbid")
    kind: RunnerKind
    plugins: list[str] = Field(default_factory=list, description="pytest plugins (modules) loaded with -p")
    command: list[str] | None = None
    test_commands: list[list[str]] = Field(
        default_factory=list,
        description="more commands that count as running the tests in an agent's shell (e.g. npm test)",
    )

    @model_validator(mode="after")
    def _command_for_command(self) -> "RunnerSpec":
        if self.kind == "command" and not self.command:
            raise ValueError('runner kind "command" needs command = [...] with {junit} in it')
        if self.kind != "command" and self.command:
            raise ValueError(f'runner kind {self.kind!r} takes no command; remove it or use kind = "command"')
        if self.plugins and self.kind != "pytest":
            raise ValueError('plugins are pytest plugins; remove them or use kind = "pytest"')
        return self


class ProtectSpec(BaseModel):
    """Paths an agent may not change, on top of what the runner kind protects by itself.

    files: exact workspace-relative paths. dirs: everything below these top-level folders.
    names: glob patterns matched against every component of a path (`node_modules`, `.npmrc`,
    `*.config.js`). shadow_roots (Python packs): folders put first on sys.path by the gate, where a
    module named like a stdlib or installed one would replace it ("" is the workspace root).
    """

    model_config = ConfigDict(extra="forbid")
    files: list[str] = Field(default_factory=list)
    dirs: list[str] = Field(default_factory=list)
    names: list[str] = Field(default_factory=list)
    shadow_roots: list[str] = Field(default_factory=list)


COMMIT_SHA = r"^[0-9a-f]{40}$"


class PackSource(BaseModel):
    """The repository a pack's fixture is a snapshot of, and the commit it was taken at: where
    `rig task mine` looks for fixes."""

    model_config = ConfigDict(extra="forbid")
    repo: str = Field(default="", description="the repository folder's name, for people")
    commit: str = Field(pattern=COMMIT_SHA)


class PackSpec(BaseModel):
    """A task pack's manifest: pack.toml. Folders are relative to the file."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=PACK_NAME)
    description: str = ""
    language: str = ""
    fixture: str = "fixture"
    tasks: str = "tasks"
    hidden_tests: str = "hidden_tests"
    gate: GateSpec
    runner: RunnerSpec
    protect: ProtectSpec = Field(default_factory=ProtectSpec)
    docs: list[str] = Field(
        default_factory=lambda: ["README.md", "CONTRIBUTING.md", "AGENTS.md", "CLAUDE.md", "docs/*"],
        description="glob patterns of documentation (a `*` crosses folders): reading one is reading docs",
    )
    context_files: list[str] = Field(
        default_factory=lambda: ["AGENTS.md", "CLAUDE.md", "GEMINI.md"],
        description="the agent-instruction files a condition commonly removes",
    )
    source: PackSource | None = None


class Pack(BaseModel):
    """A loaded pack: its manifest and the folder it lives in."""

    spec: PackSpec
    root: Path

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def fixture_dir(self) -> Path:
        return self.root / self.spec.fixture

    @property
    def tasks_dir(self) -> Path:
        return self.root / self.spec.tasks

    @property
    def hidden_dir(self) -> Path:
        return self.root / self.spec.hidden_tests


# --- Tasks: tasks/<id>/task.toml and the files that belong to it (loaded by rig.tasks) -------------


class Expectation(BaseModel):
    """Where a wrong workspace must fail: gate stages and hidden tests (`module::test`)."""

    model_config = ConfigDict(extra="forbid")
    fails_stages: list[str] = Field(default_factory=list)
    fails_hidden: list[str] = Field(default_factory=list)


class Decoy(Expectation):
    reason: str = Field(min_length=1, description="the plausible wrong solution this patch stands for")


class TaskSource(BaseModel):
    """Where a mined task came from (`rig task mine`): the fix commit, and the hidden tests that
    passed both before and after it (the ones that failed before are `baseline.fails_hidden`)."""

    model_config = ConfigDict(extra="forbid")
    repo: str = ""
    commit: str = Field(pattern=COMMIT_SHA)
    subject: str = ""
    pass_to_pass: list[str] = Field(default_factory=list)


class TaskSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(pattern=r"^[a-z0-9_]+$")
    hypothesis: str = Field(min_length=1, description="the harness component this task measures")
    prompt: str = Field(min_length=1)
    timeout_s: int = Field(gt=0)
    baseline: Expectation
    decoys: dict[str, Decoy]
    source: TaskSource | None = None
    scope: list[str] | None = Field(
        default=None,
        description="globs (fnmatch, `*` crosses `/`) of the workspace paths the task may change; "
        "a change elsewhere is listed in the record's out_of_scope; None: no scope",
    )
    scope_enforced: bool = Field(
        default=False, description="a change outside `scope` fails the run (stage scope)"
    )

    @model_validator(mode="after")
    def _enforced_needs_scope(self) -> "TaskSpec":
        if self.scope_enforced and not self.scope:
            raise ValueError(
                "scope_enforced = true needs scope = [globs]; list the paths the task may change"
            )
        return self


class Task(BaseModel):
    """A loaded task: its spec and the files that belong to it."""

    spec: TaskSpec
    dir: Path
    hidden_dir: Path
    pack: Pack

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def setup_patch(self) -> Path:
        return self.dir / "setup.patch"

    @property
    def solution_patch(self) -> Path:
        return self.dir / "solution.patch"

    def decoy_patch(self, name: str) -> Path:
        return self.dir / "decoys" / f"{name}.patch"


# --- Experiments: experiments/<name>.toml (loaded by rig.experiment) and its plan ------------------


class Provider(BaseModel):
    """Where the model is: the rig's mock server, or a real provider reached with the user's key."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["mock", "real"] = "mock"
    name: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None


class Condition(BaseModel):
    """One arm of an experiment: what differs in the workspace and in the harness's options."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    remove_files: list[str] = Field(default_factory=list, description="paths removed from the workspace")
    write_files: dict[str, str] = Field(default_factory=dict, description="path -> content written")
    skills: list[str] = Field(default_factory=list, description="skill directories to install")
    tools: list[str] | None = Field(default=None, description="tool set; None means the default")
    thinking: str | None = None
    harness_version: str | None = Field(
        default=None,
        description="another exact version of the harness CLI (from the npm registry); None: the pinned one",
    )
    harness_options: dict[str, Any] = Field(default_factory=dict)
    append_system_prompt: str | None = Field(
        default=None,
        description="text appended to the harness's system prompt (in a config also {file = PATH}, "
        "relative to the config's folder); the workspace is untouched",
    )
    harness_settings: dict[str, Any] = Field(
        default_factory=dict,
        description="merged into the harness's own config in the run's private config directory; "
        "only the top-level keys its adapter declares",
    )
    harness_args: list[str] = Field(
        default_factory=list, description="extra command-line arguments, only options its adapter declares"
    )
    extensions: list[str] = Field(
        default_factory=list,
        description="extension files (relative to the rig's repository) the harness loads, copied into "
        "the run's private config directory",
    )

    @field_validator("append_system_prompt", mode="before")
    @classmethod
    def _prompt_text(cls, value: Any, info: ValidationInfo) -> Any:
        """`{file = PATH}` becomes the file's text: the record pins what was appended, not a path."""
        if not isinstance(value, dict):
            return value
        if set(value) != {"file"} or not isinstance(value["file"], str):
            raise ValueError('give text or {file = "PATH"}')
        base = Path((info.context or {}).get("base", "."))
        path = base / value["file"]
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8"
            raise ValueError(f"cannot read {path} ({reason}); give a file relative to the config") from None

    @field_validator("append_system_prompt")
    @classmethod
    def _prompt_not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("is empty; remove it or give the text to append")
        return value

    @field_validator("harness_version")
    @classmethod
    def _exact_version(cls, value: str | None) -> str | None:
        if value is not None and not re.match(EXACT_VERSION, value):
            raise ValueError(f"{value!r} is not an exact version; give one such as 1.2.3, not a range or tag")
        return value


class Timeouts(BaseModel):
    model_config = ConfigDict(extra="forbid")
    agent_s: int | None = Field(default=None, gt=0, description="wall timeout; default: the task's timeout_s")
    stall_s: float = Field(default=DEFAULT_STALL_S, gt=0, description="stream silence before a kill")
    check_s: float = Field(default=600, gt=0)
    hidden_s: float = Field(default=600, gt=0)


class Limits(BaseModel):
    """Bounds on what an agent may write: its streams' logs, any single file, the workspace's size.

    A workspace past max_files or max_depth is scored as a failure at stage `workspace_limits`.
    """

    model_config = ConfigDict(extra="forbid")
    stream_head_bytes: int = Field(default=DEFAULT_HEAD_BYTES, ge=0, description="kept from a stream's start")
    stream_tail_bytes: int = Field(
        default=DEFAULT_TAIL_BYTES, ge=0, le=MAX_TAIL_BYTES, description="kept from a stream's end"
    )
    file_bytes: int | None = Field(
        default=DEFAULT_FILE_BYTES, gt=0, description="largest file an agent may write"
    )
    max_files: int = Field(
        default=DEFAULT_MAX_ENTRIES, gt=0, description="files and directories the workspace may hold"
    )
    max_depth: int = Field(default=DEFAULT_MAX_DEPTH, gt=0, description="deepest directory level allowed")


class Stopping(BaseModel):
    """`[stopping]`: stop the experiment once the comparison of two conditions is decided.

    rig.analysis.sequential looks after every completed round of repetitions; see docs/stopping.md.
    """

    model_config = ConfigDict(extra="forbid")
    compare: tuple[str, str] = Field(description="the reference condition, then the one compared with it")
    alpha: float = Field(default=0.05, gt=0, lt=1, description="type I error, however often it looks")
    min_effect: float = Field(gt=0, lt=1, description="smallest success-rate difference worth detecting")
    max_repetitions: int | None = Field(
        default=None, ge=1, description="repetitions planned; default: the experiment's repetitions"
    )

    @field_validator("compare")
    @classmethod
    def _two_conditions(cls, compare: tuple[str, str]) -> tuple[str, str]:
        if compare[0] == compare[1]:
            raise ValueError(f"compares condition {compare[0]!r} with itself; name two different conditions")
        return compare


class RunBudget(BaseModel):
    """`[run_budget]`: what one run may spend. The rig adds up the usage the harness streams as it
    runs and stops the agent once a limit is passed; the run fails at stage `budget` (docs/budgets.md).
    Not the experiment's own `max_cost_usd`, which stops starting runs (rig.budget)."""

    model_config = ConfigDict(extra="forbid")
    max_tokens: int | None = Field(default=None, gt=0, description="tokens of one run, every kind summed")
    max_cost_usd: float | None = Field(default=None, gt=0, description="USD one run may cost")

    @model_validator(mode="after")
    def _some_limit(self) -> "RunBudget":
        if self.max_tokens is None and self.max_cost_usd is None:
            raise ValueError("sets no limit; set max_tokens or max_cost_usd, or remove [run_budget]")
        return self


# The agent's network (docs/network.md): only the model, the model and listed host:port, or all of it.
NetworkPolicy = Literal["model-only", "allowlist", "open"]
NETWORK_POLICIES: tuple[str, ...] = ("model-only", "allowlist", "open")
_HOST_PORT = re.compile(r"^(?P<host>[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]):(?P<port>\d{1,5})$")


def parse_host_port(value: str) -> tuple[str, int]:
    """("host", port) of "host:port" (an IPv6 host in brackets); raises ValueError naming the fix."""
    match = _HOST_PORT.match(value.strip())
    port = int(match.group("port")) if match else 0
    if match is None or not 0 < port < 65536:
        raise ValueError(f'{value!r} is not host:port; write e.g. "pypi.org:443" or "127.0.0.1:8080"')
    return match.group("host").strip("[]").lower(), port


class Experiment(BaseModel):
    """An experiment's design. That `harness` names a registered adapter is checked where the
    config is loaded (rig.experiment.load_experiment): the registry is no part of the schema."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    title: str = ""
    harness: str = Field(description="a harness name of harnesses.registry")
    pack: str | None = Field(
        default=None,
        description="the task pack's folder (relative: to the rig's repository); None: the built-in pack",
    )
    model: str | None = None
    thinking: str | None = None
    provider: Provider = Field(default_factory=Provider)
    tasks: list[str] | Literal["all"] = "all"
    conditions: list[Condition] = Field(min_length=1)
    repetitions: int = Field(default=1, ge=1)
    workers: int = Field(default=1, ge=1)
    seed: int = 0
    max_attempts: int = Field(default=3, ge=1, description="attempts per run when infra failures recur")
    max_consecutive_infra: int = Field(default=3, ge=1, description="stop after this many in a row")
    timeouts: Timeouts = Field(default_factory=Timeouts)
    limits: Limits = Field(default_factory=Limits)
    stopping: Stopping | None = Field(default=None, description="stop early once decided; None: run the plan")
    network: NetworkPolicy = Field(
        default="model-only",
        description="what the agent may reach: the model only, the model and `allow`, or any host (warned)",
    )
    allow: list[str] = Field(
        default_factory=list,
        description="host:port the agent may reach besides the model (network allowlist)",
    )
    max_cost_usd: float | None = Field(
        default=None,
        gt=0,
        description="budget: no run starts once the spent cost plus the runs in flight would pass it",
    )
    max_runs: int | None = Field(
        default=None, ge=1, description="budget: scored runs recorded plus runs in flight, at most"
    )
    run_budget: RunBudget | None = Field(
        default=None, description="per-run limits: the agent is stopped once it passes one (stage budget)"
    )

    @field_validator("allow")
    @classmethod
    def _host_ports(cls, allow: list[str]) -> list[str]:
        for entry in allow:
            parse_host_port(entry)
        return allow

    @model_validator(mode="after")
    def _allow_with_allowlist(self) -> "Experiment":
        if self.allow and self.network != "allowlist":
            raise ValueError(f'allow is set but network is {self.network!r}; set network = "allowlist"')
        if self.network == "allowlist" and not self.allow:
            raise ValueError(
                'network = "allowlist" with an empty allow; list host:port entries or use "model-only"'
            )
        return self

    @field_validator("conditions")
    @classmethod
    def _unique_conditions(cls, conditions: list[Condition]) -> list[Condition]:
        names = [c.name for c in conditions]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"condition names must be unique; repeated: {', '.join(duplicates)}")
        return conditions

    @model_validator(mode="after")
    def _tasks_not_empty(self) -> "Experiment":
        if isinstance(self.tasks, list) and not self.tasks:
            raise ValueError('tasks is empty; list task ids or use "all"')
        return self

    @model_validator(mode="after")
    def _stopping_conditions(self) -> "Experiment":
        names = [c.name for c in self.conditions]
        missing = [n for n in self.stopping.compare if n not in names] if self.stopping else []
        if missing:
            raise ValueError(
                f"stopping.compare names {missing[0]!r}, which is not a condition; "
                f"use two of {', '.join(names)}"
            )
        return self

    @property
    def planned_repetitions(self) -> int:
        """Repetitions in the plan: `[stopping]`'s max_repetitions when it sets one."""
        if self.stopping is not None and self.stopping.max_repetitions is not None:
            return self.stopping.max_repetitions
        return self.repetitions

    def digest(self) -> str:
        """A hash of the design: results of one design are never pooled with another's.

        `workers` and the budget are left out: how many runs go in parallel and how much may be
        spent are how the design is executed, not what it measures, so an experiment may be resumed
        with more (or fewer) workers, or a raised budget.
        """
        design = self.model_dump(mode="json", exclude={"workers", "max_cost_usd", "max_runs"})
        return hashlib.sha256(json.dumps(design, sort_keys=True).encode()).hexdigest()


class PlanItem(BaseModel):
    run_id: str
    task: str
    condition: str
    repetition: int


# --- What the agent did: its process as seen from outside, and the metrics of its session ---------


class StreamStats(BaseModel):
    """How much a stream carried and how much of it the log file kept."""

    bytes: int = 0
    kept_bytes: int = 0
    truncated: bool = False


class BudgetStop(BaseModel):
    """The run budget limit an agent passed, and its usage when the rig stopped it."""

    limit: Literal["max_tokens", "max_cost_usd"]
    allowed: float = Field(description="the limit's value")
    tokens: int = Field(description="tokens the harness had reported when it was stopped")
    cost_usd: float | None = Field(description="their cost (None where no response could be priced)")
    responses: int = Field(description="model responses whose usage was counted")


class AgentRun(BaseModel):
    """What the harness did, as seen from outside: the process and where its logs are."""

    command: list[str]
    exit_code: int | None
    timed_out: bool
    stalled: bool
    wall_s: float
    session_path: Path | None
    stdout_path: Path
    stderr_path: Path
    leftover_processes: int = Field(default=0, description="agent processes still alive after it exited")
    removed_links: list[str] = Field(
        default_factory=list,
        description="symlinks out of run_dir the agent left, removed before the rig writes",
    )
    streams: dict[str, StreamStats] = Field(default_factory=dict)
    sandboxed: bool = False
    processes: str | None = Field(
        default=None,
        description="what contained every process it started: bwrap-pidns, cgroup, pidns or token-reaper",
    )
    network: "NetworkOutcome | None" = Field(
        default=None, description="what the agent's connections did (None when its network was not confined)"
    )
    budget: BudgetStop | None = Field(
        default=None, description="the run budget limit it passed, when the rig stopped it there"
    )


class ModelUsage(BaseModel):
    """The tokens and cost of one model within a run (the main model, a side or subagent model)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float | None = None


class Metrics(BaseModel):
    """What the session says the agent did. Every field is derived from saved files only."""

    model: str | None = None
    thinking_level: str | None = None
    assistant_messages: int = Field(
        default=0, description="model responses, as the harness records them (README: Metrics)"
    )
    tool_calls: int = 0
    tool_calls_by_name: dict[str, int] = Field(default_factory=dict)
    tool_errors: int = Field(
        default=0,
        description="tool calls whose tool did not run or reported its own failure; a command that ran "
        "and exited non-zero is not one",
    )
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float | None = None
    cost_source: str | None = Field(
        default=None,
        description="`harness` when the harness reported the cost, else how the rig priced it (e.g. "
        "`genai-prices 0.2.3`), with why it could not where cost_usd is None",
    )
    stop_reasons: list[str] = Field(default_factory=list)
    error_messages: list[str] = Field(default_factory=list)
    transport_failures: int = Field(
        default=0,
        description="failed attempts at a model request, recovered from or not: each request that "
        "errored, was cut off or lost its transport counts once, whether the harness then retried it, "
        "fell back to another transport or reconnected (Pi: errored and truncated responses, "
        "provider_transport_failure diagnostics; Claude Code: api_retry events, API-error messages; "
        "Codex: error and turn.failed events). A failure the harness recovered from (a retry, "
        "fallback or reconnect that then succeeded) never by itself makes a run infrastructure",
    )
    bash_commands: list[str] = Field(default_factory=list)
    bash_search_commands: list[str] = Field(default_factory=list)
    read_paths: list[str] = Field(default_factory=list)
    read_attempts: list[str] = Field(
        default_factory=list, description="every path a read tool was called with, failed reads included"
    )
    docs_read: list[str] = Field(default_factory=list)
    ran_check_script: bool = False
    ran_pytest: bool = False
    ran_tests: bool = Field(
        default=False, description="ran the pack's test runner (pytest, node --test, ...)"
    )
    read_skill: bool = False
    final_text: str | None = None
    complete: bool = Field(
        default=True,
        description="whether the parser read every usage figure the session should hold; False when it met "
        "a format or version it does not know, usage in an event it does not read, or no usage at all "
        "where a model responded: the token and cost fields are then a lower bound, and reports leave "
        "the run out of cost and token comparisons (its success still counts)",
    )
    gaps: list[str] = Field(
        default_factory=list,
        description="what the parser could not read, one reason each: why the metrics are incomplete, "
        "or a figure the harness version does not record while the totals and cost stay exact (e.g. "
        "no thinking count: reasoning_tokens is then 0 and the reasoning is inside output_tokens)",
    )
    per_model: dict[str, ModelUsage] = Field(
        default_factory=dict,
        description="tokens and cost per model where the harness records them by model (Claude Code's "
        "modelUsage: the main model, side requests, subagents); the token and cost totals are then their "
        "sums. Empty where the harness records one model only",
    )
    compactions: int | None = Field(
        default=None,
        description="context compactions the session records, automatic and manual (Pi: `compaction` "
        "entries; Claude Code: `compact_boundary` system messages; Codex: `compacted` rollout items or "
        "`context_compacted` events, whichever are more); None where the harness's session does not record "
        "them (README: Metrics, compaction). The three compaction_tokens fields are 0 when this is 0 and "
        "None when it is None",
    )
    compaction_tokens_before: int | None = Field(
        default=None,
        description="the context's size in tokens just before each compaction, as the harness estimated "
        "it, summed over the run's compactions (Pi: tokensBefore; Claude Code: pre_tokens); None where the "
        "session does not record it for every compaction (Codex)",
    )
    compaction_tokens_after: int | None = Field(
        default=None,
        description="the context's size in tokens just after each compaction, summed (Claude Code: "
        "post_tokens); None where the session does not record it for every compaction (Pi, Codex)",
    )
    compaction_tokens: int | None = Field(
        default=None,
        description="tokens (input, output and cache) spent by the summarization requests that made the "
        "compactions, where the session tells them apart (Codex 0.171: the `token_usage_record` each "
        "`compacted` item names; they are in the totals too); None where it does not: Pi records no usage "
        "for its summarization requests (they are then missing from the token and cost totals, and the "
        "metrics are incomplete), Claude Code counts them in its totals without telling them apart",
    )

    def add_tokens(self, usage: ModelUsage) -> None:
        """Add the tokens of one response or one model (not its cost) to the run's totals."""
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cache_read_tokens += usage.cache_read_tokens
        self.cache_write_tokens += usage.cache_write_tokens
        self.reasoning_tokens += usage.reasoning_tokens
        self.total_tokens += usage.total_tokens

    def incomplete(self, reason: str) -> None:
        """Mark the metrics incomplete for `reason` (each reason is kept once)."""
        self.complete = False
        self.unrecorded(reason)

    def unrecorded(self, reason: str) -> None:
        """Note a figure the session does not hold although the totals and cost are exact (each
        reason is kept once): the run still counts in cost and token comparisons."""
        if reason not in self.gaps:
            self.gaps.append(reason)


class TranscriptToolCall(BaseModel):
    """One tool call of a model turn, with what it returned."""

    id: str | None = None
    name: str
    arguments: dict[str, Any] | str = Field(
        default_factory=dict, description="the arguments as the harness recorded them (a string if not JSON)"
    )
    output: str | None = Field(
        default=None, description="what the tool returned; None if no result was saved"
    )
    is_error: bool | None = Field(default=None, description="None where the harness does not say")


class TranscriptStep(BaseModel):
    """One step of a session: the task's prompt (`user`), a model turn (`agent`) or a note the
    harness recorded (`system`: an error, a retry). Token counts and cost are per turn; None where
    the harness records none for it."""

    source: Literal["system", "user", "agent"]
    text: str = ""
    reasoning: str | None = None
    model: str | None = None
    tool_calls: list[TranscriptToolCall] = Field(default_factory=list)
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None
    cost_usd: float | None = None
    timestamp: str | None = None


class Transcript(BaseModel):
    """A session as a sequence of steps, read from an attempt's saved files by its harness's
    adapter: what a viewer shows and an ATIF export carries. Never stored in a record."""

    harness: str
    session_id: str | None = None
    model: str | None = None
    steps: list[TranscriptStep] = Field(default_factory=list)
    gaps: list[str] = Field(
        default_factory=list, description="what of the saved files could not be read into steps, and why"
    )


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
    xfailed, which also makes the outcome not ok.
    """

    exit_code: int | None
    ok: bool
    collected: int = 0
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


class NetworkEndpoint(BaseModel):
    """One host:port an agent's connections went to (or were refused at), with their totals."""

    host: str
    port: int
    connections: int = 0
    bytes_out: int = Field(default=0, description="bytes from the agent to the host")
    bytes_in: int = Field(default=0, description="bytes from the host to the agent")


class NetworkOutcome(BaseModel):
    """The agent's network in one run: the policy, how it was enforced, and what went through it.

    Only connections that reached the rig's egress proxy are counted (by the proxy's address or a
    model endpoint's own); a raw socket to any other port or address, and a DNS lookup, find
    nothing in the agent's network namespace and fail there, unlogged (docs/network.md).
    """

    policy: str
    active: bool = Field(description="whether the agent ran in a network namespace of its own")
    backend: str | None = Field(default=None, description="'bwrap-netns' or 'unshare-netns'; None when open")
    detail: str | None = None
    allowed: list[str] = Field(default_factory=list, description="host:port the policy let through")
    reached: list[NetworkEndpoint] = Field(default_factory=list, description="allowed connections")
    refused: list[NetworkEndpoint] = Field(
        default_factory=list, description="refused attempts per host:port (connections = attempts)"
    )
    failed: list[NetworkEndpoint] = Field(
        default_factory=list, description="allowed attempts whose host could not be reached"
    )
    log: str | None = Field(default=None, description="the proxy's log in the attempt folder")

    @property
    def refused_attempts(self) -> int:
        """How many connection attempts the policy refused."""
        return sum(e.connections for e in self.refused)

    def warning(self) -> str | None:
        """The warning every record of a run with an unconfined network carries, None when confined."""
        if self.active:
            return None
        return f"network: the agent could reach any host this machine can ({self.detail})"


AgentRun.model_rebuild()


# --- The run record: one line of runs.jsonl (or quarantine.jsonl) per attempt ---------------------
# Every field a reader may question is here with its evidence: the verdicts of the gate and the
# hidden tests, the tampering found, the agent's process outcome, the parsed metrics, the infra
# classification and the pins that say exactly what was measured. `rig schema` prints it.

# Bumped whenever a field is added or changes meaning; rig.migrate brings older records up to date.
RECORD_SCHEMA_VERSION = 9
# Infrastructure rules of attempts the agent's outcome did not decide (the rig failed, or the Dask
# worker running it was lost or refused it): nothing to re-derive them from.
RIG_SIDE_RULES = frozenset({"rig_error", "worker_lost", "worker_refused"})


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


# --- What the rig's commands report: calibrate, calibrate --harness, doctor, status, reclassify ----

ItemKind = Literal["clean", "baseline", "solution", "decoy", "fixture"]


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
    "hidden-clash",
    "no-message",
    "already-mined",
    "no-fail-to-pass",
    "solution-fails",
    "flaky",
    "calibration",
    "error",
]


class MinedCommit(BaseModel):
    """One commit `rig task mine` looked at: the task made of it, or why none was."""

    commit: str
    subject: str
    verdict: MineVerdict
    reason: str
    task: str | None = None
    fail_to_pass: list[str] = Field(default_factory=list)
    pass_to_pass: list[str] = Field(default_factory=list)
    decoys: list[str] = Field(default_factory=list)


class MineReport(BaseModel):
    """What `rig task mine` did: every commit looked at, in history order (newest first)."""

    pack: str
    snapshot: str
    commits: list[MinedCommit]


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
