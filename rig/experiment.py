"""Experiment configs: `experiments/<name>.toml`, validated before anything runs."""

import hashlib
import json
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harnesses.base import DEFAULT_FILE_BYTES, DEFAULT_STALL_S, Condition
from harnesses.cli import Provider
from rig.streams import DEFAULT_HEAD_BYTES, DEFAULT_TAIL_BYTES, MAX_TAIL_BYTES
from rig.untrusted import DEFAULT_MAX_DEPTH, DEFAULT_MAX_ENTRIES


class ExperimentError(Exception):
    """A config that cannot run; the message names the file, the field and the fix."""


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


class Experiment(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    title: str = ""
    harness: str = Field(description="a harness name of harnesses.registry")
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

    @field_validator("harness")
    @classmethod
    def _registered(cls, harness: str) -> str:
        from harnesses.registry import harness_names

        names = harness_names()
        if harness not in names:
            raise ValueError(f"no harness named {harness!r}; use one of {', '.join(names)}")
        return harness

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
        """A hash of the design: results of one design are never pooled with another's.

        `workers` is left out: how many runs go in parallel is how the design is executed, not what
        it measures, so an experiment may be resumed with more (or fewer) workers.
        """
        design = self.model_dump(mode="json", exclude={"workers"})
        return hashlib.sha256(json.dumps(design, sort_keys=True).encode()).hexdigest()


def load_experiment(path: Path) -> Experiment:
    """Parse and validate an experiment file; the name defaults to the file's stem."""
    if not path.is_file():
        raise ExperimentError(f"{path}: no such experiment file; see experiments/*.toml")
    try:
        # TOML is UTF-8 by definition, whatever the locale says.
        data = tomllib.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise ExperimentError(f"{path}: cannot read it ({exc.strerror}); check the file") from None
    except UnicodeDecodeError as exc:
        raise ExperimentError(
            f"{path}: not UTF-8 (byte {exc.start} cannot be decoded); save the file as UTF-8"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ExperimentError(f"{path}: not valid TOML ({_one_line(str(exc))}); fix the syntax") from None
    named = "name" in data
    data.setdefault("name", path.stem)
    try:
        return Experiment.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        message = _one_line(err["msg"].removeprefix("Value error, "))
        if where == "name" and not named:
            raise ExperimentError(
                f"{path}: the experiment is named after the file, and {path.stem!r}: {message}; "
                'rename the file or set name = "..." in it'
            ) from None
        raise ExperimentError(f"{path}: {where}: {message}; fix the config") from None


def _one_line(text: str) -> str:
    """Error text on one line: a multi-line message would break the one-line error contract."""
    return " ".join(text.split())
