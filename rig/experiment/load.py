"""Experiment configs: `experiments/<name>.toml`, validated before anything runs."""

from pathlib import Path

from pydantic import ValidationError

from harnesses.registry import (
    HarnessUnavailable,
    adapter_class,
    check_factors,
    check_run_budget,
    harness_names,
)
from rig.packs.manifest import PackError, experiment_pack
from rig.packs.tomlfile import first_error, read_toml
from rig.paths import named_in
from rig.schema import Experiment


class ExperimentError(Exception):
    """A config that cannot run; the message names the file, the field and the fix."""


def load_experiment(path: Path) -> Experiment:
    """Parse and validate an experiment file, its harness against the registry; the name defaults to
    the file's stem, and its pack, skills and extensions are found from the file's folder
    (rig.paths.named_in)."""
    if not path.is_file():
        raise ExperimentError(f"{path}: no such experiment file; see experiments/*.toml")
    data = read_toml(path, ExperimentError)
    named = "name" in data
    data.setdefault("name", path.stem)
    try:
        # A condition's `append_system_prompt = {file = ...}` is read relative to the config.
        experiment = Experiment.model_validate(data, context={"base": path.parent})
    except ValidationError as exc:
        where, message = first_error(exc)
        if where == "name" and not named:
            raise ExperimentError(
                f"{path}: the experiment is named after the file, and {path.stem!r}: {message}; "
                'rename the file or set name = "..." in it'
            ) from None
        raise ExperimentError(f"{path}: {where}: {message}; fix the config") from None
    try:
        pack = experiment_pack(experiment.pack, path.parent)
    except PackError as exc:
        raise ExperimentError(f"{path}: pack: {exc}") from None
    # Skills and extensions are found as the pack is: beside the experiment file, else among the
    # rig's files. One found nowhere stays as written, refused below with its own fix.
    conditions = [
        condition.model_copy(
            update={
                "skills": [named_in(s, path.parent) or s for s in condition.skills],
                "extensions": [named_in(e, path.parent) or e for e in condition.extensions],
            }
        )
        for condition in experiment.conditions
    ]
    experiment = experiment.model_copy(update={"pack": pack, "conditions": conditions})
    try:
        names = harness_names()
    except HarnessUnavailable as exc:  # an installed package's entry point clashes: its own fix
        raise ExperimentError(str(exc)) from None
    if experiment.harness not in names:
        raise ExperimentError(
            f"{path}: harness: no harness named {experiment.harness!r}; use one of {', '.join(names)}; "
            "fix the config"
        )
    pinned = [c.name for c in experiment.conditions if c.harness_version]
    if pinned and not adapter_class(experiment.harness).installs_versions:
        raise ExperimentError(
            f"{path}: conditions.{pinned[0]}.harness_version: harness {experiment.harness!r} cannot run "
            "another version of its CLI; remove harness_version"
        )
    for condition in experiment.conditions:
        try:
            check_factors(experiment.harness, condition)
        except ValueError as exc:
            raise ExperimentError(f"{path}: {exc}") from None
    if experiment.run_budget is not None:
        try:
            check_run_budget(experiment.harness, experiment.run_budget, experiment.model)
        except ValueError as exc:
            raise ExperimentError(f"{path}: {exc}") from None
    if experiment.stopping is not None and experiment.estimand != "these_tasks":
        # The sequential test pairs runs of the same tasks: more repetitions narrow what is known of
        # these tasks, never of tasks like them. Checked here, not in the schema, so that designs
        # stored before the field (estimand unset) still read.
        raise ExperimentError(
            f"{path}: [stopping] decides about the tasks run (an exact test on paired runs); set "
            'estimand = "these_tasks", or remove [stopping] to answer for tasks like these'
        )
    return experiment
