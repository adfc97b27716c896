"""An experiment (experiments/<name>.toml): provider, conditions, bounds, stopping, budgets, its plan."""

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from rig.schema.pack import (
    DEFAULT_AFTER_FINAL_S,
    DEFAULT_FILE_BYTES,
    DEFAULT_HEAD_BYTES,
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_ENTRIES,
    DEFAULT_STALL_S,
    DEFAULT_TAIL_BYTES,
    EXACT_VERSION,
    MAX_TAIL_BYTES,
)

# --- Experiments: experiments/<name>.toml (loaded by rig.experiment.load) and its plan ------------------


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
    skills: list[str] = Field(
        default_factory=list,
        description="skill directories to install (relative to the experiment file, else to the rig's "
        "files, or absolute)",
    )
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
        description="extension files the harness loads (relative to the experiment file, else to the rig's "
        "files, or absolute), copied into the run's private config directory",
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
    after_final_s: float = Field(
        default=DEFAULT_AFTER_FINAL_S,
        gt=0,
        description="silence after the harness streamed its final answer before the rig ends it; the run "
        "is scored on its work (agent.ended_after_final), neither infrastructure nor a hang",
    )
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
    Not the experiment's own `max_cost_usd`, which stops starting runs (rig.experiment.budget)."""

    model_config = ConfigDict(extra="forbid")
    max_tokens: int | None = Field(default=None, gt=0, description="tokens of one run, every kind summed")
    max_cost_usd: float | None = Field(default=None, gt=0, description="USD one run may cost")

    @model_validator(mode="after")
    def _some_limit(self) -> "RunBudget":
        if self.max_tokens is None and self.max_cost_usd is None:
            raise ValueError("sets no limit; set max_tokens or max_cost_usd, or remove [run_budget]")
        return self


# The question an experiment's comparisons answer (docs/statistics.md): tasks like these, or exactly these.
Estimand = Literal["population", "these_tasks"]

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
    config is loaded (rig.experiment.load.load_experiment): the registry is no part of the schema."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    title: str = ""
    harness: str = Field(description="a harness name of harnesses.registry")
    pack: str | None = Field(
        default=None,
        description="the task pack: `builtin:NAME`, a pack shipped with the rig by its name, or its "
        "folder (relative: to the experiment file; if not there, to the rig's checkout); None: the "
        "built-in pack",
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
    estimand: Estimand = Field(
        default="population",
        description="the question the success and score comparisons answer, each with the interval and "
        "the test of that one estimand: `population` (tasks like these: task-clustered interval, Wald "
        "t-test) or `these_tasks` (exactly the tasks run: exact test, Newcombe's interval)",
    )
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
