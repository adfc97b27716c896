"""Experiment configs: `experiments/<name>.toml`, validated before anything runs."""

import tomllib
from pathlib import Path

from pydantic import ValidationError

from harnesses.registry import adapter_class, harness_names
from rig.models import Experiment


class ExperimentError(Exception):
    """A config that cannot run; the message names the file, the field and the fix."""


def load_experiment(path: Path) -> Experiment:
    """Parse and validate an experiment file, its harness against the registry; the name defaults to
    the file's stem."""
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
        experiment = Experiment.model_validate(data)
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
    names = harness_names()
    if experiment.harness not in names:
        raise ExperimentError(
            f"{path}: harness: no harness named {experiment.harness!r}; use one of {', '.join(names)}; "
            "fix the config"
        )
    pinned = [c.name for c in experiment.conditions if c.harness_version]
    if pinned and not hasattr(adapter_class(experiment.harness), "install_version"):
        raise ExperimentError(
            f"{path}: conditions.{pinned[0]}.harness_version: harness {experiment.harness!r} cannot run "
            "another version of its CLI; remove harness_version"
        )
    return experiment


def _one_line(text: str) -> str:
    """Error text on one line: a multi-line message would break the one-line error contract."""
    return " ".join(text.split())
