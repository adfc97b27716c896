"""Experiment configs: `experiments/<name>.toml`, validated before anything runs."""

import hashlib
import json
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harnesses.base import DEFAULT_STALL_S, Condition
from harnesses.cli import Provider

HARNESSES = ("scripted", "pi", "claude-code", "codex")


class ExperimentError(Exception):
    """A config that cannot run; the message names the file, the field and the fix."""


class Timeouts(BaseModel):
    model_config = ConfigDict(extra="forbid")
    agent_s: int | None = Field(default=None, gt=0, description="wall timeout; default: the task's timeout_s")
    stall_s: float = Field(default=DEFAULT_STALL_S, gt=0, description="stream silence before a kill")
    check_s: float = Field(default=600, gt=0)
    hidden_s: float = Field(default=600, gt=0)


class Experiment(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    title: str = ""
    harness: Literal["scripted", "pi", "claude-code", "codex"]
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

    def digest(self) -> str:
        """A hash of the design: results of one design are never pooled with another's."""
        return hashlib.sha256(json.dumps(self.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()


def load_experiment(path: Path) -> Experiment:
    """Parse and validate an experiment file; the name defaults to the file's stem."""
    if not path.is_file():
        raise ExperimentError(f"{path}: no such experiment file; see experiments/*.toml")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ExperimentError(f"{path}: not valid TOML ({exc}); fix the syntax") from exc
    data.setdefault("name", path.stem)
    try:
        return Experiment.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        message = err["msg"].removeprefix("Value error, ")
        raise ExperimentError(f"{path}: {where}: {message}; fix the config") from exc
