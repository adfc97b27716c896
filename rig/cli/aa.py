"""`rig aa`: the noise floor of an experiment, from one of its arms run twice (an A/A experiment)."""

import contextlib
import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from rig.analysis import NoiseFloor
    from rig.schema import Experiment, Task

from rig.cli.common import (
    ResultsOption,
    context_for,
    fail,
    interruptible,
    load_design,
    report_warnings,
    store_errors,
)
from rig.cli.main import app


@app.command()
def aa(
    experiment: Annotated[Path, typer.Argument(help="The experiment config whose arm to run twice.")],
    arm: Annotated[str, typer.Option("--arm", help="The condition to run as two identical conditions.")],
    reps: Annotated[
        int | None,
        typer.Option(min=1, help="Repetitions per task of each copy (default: the experiment's)."),
    ] = None,
    from_: Annotated[
        tuple[Path, Path] | None,
        typer.Option(
            "--from",
            help="Run nothing: read the arm's runs in two results folders (RESULTS_A RESULTS_B), "
            "e.g. the experiment's and a rerun's.",
        ),
    ] = None,
    estimand: Annotated[
        str | None,
        typer.Option(
            help="population: the difference over tasks like these; these_tasks: over exactly the tasks "
            "run (default: the experiment's estimand, as its report)."
        ),
    ] = None,
    sims: Annotated[
        int, typer.Option(min=100, help="Simulated no-difference experiments for the false-positive rate.")
    ] = 1000,
    seed: Annotated[int, typer.Option(help="Seed of the simulations.")] = 0,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the analysis as JSON (a run's progress goes to stderr).")
    ] = False,
    allow_mixed_pins: Annotated[
        bool, typer.Option(help="With --from: pool folders whose pins differ (as `rig report` does).")
    ] = False,
    results_root: ResultsOption = None,
    keep_workspaces: Annotated[bool, typer.Option(help="Keep each run's workspace for debugging.")] = False,
    sandbox: Annotated[
        str,
        typer.Option(
            envvar="RIG_SANDBOX", help="auto, require or off, as for `rig run` (see `rig run --help`)."
        ),
    ] = "auto",
) -> None:
    """Run arm --arm twice, as two conditions of an experiment of their own (its results folder is
    <experiment>-aa-<arm> beside the experiment's; rerun to resume), then print its noise floor: the
    observed difference with its 95% interval, the false-positive rate the design implies and the
    minimal detectable effect at the experiment's size (docs/noise-floor.md)."""
    from rig.analysis import ESTIMANDS, copy_name

    if estimand is not None and estimand not in ESTIMANDS:
        raise fail(f"unknown estimand {estimand!r}; use {' or '.join(ESTIMANDS)}")
    design, tasks = load_design(experiment)
    # The question the experiment's own report answers, unless asked another.
    estimand = estimand or design.estimand
    if from_ is not None:
        if reps is not None:
            raise fail("--reps sets the runs of a new A/A experiment; --from reads runs already made")
        folders = list(from_)
        df = _read_two(folders, arm, allow_mixed_pins)
    else:
        names = [c.name for c in design.conditions]
        if arm not in names:
            raise fail(f"{experiment}: no condition {arm!r}; conditions: {', '.join(names)}")
        folder = _run_aa(
            experiment, design, tasks, arm, reps, results_root, keep_workspaces, sandbox, as_json
        )
        folders = [folder]
        df = _read_one(folder)
    try:
        with interruptible():
            floor = _analyse(df, arm, copy_name(arm), estimand, design.planned_repetitions, sims, seed)
    except KeyboardInterrupt:
        raise fail("interrupted; nothing was written, rerun to analyse", code=130) from None
    if as_json:
        out = {"experiment": design.name, "results": [str(f) for f in folders], **floor.as_dict()}
        typer.echo(json.dumps(out, indent=2))
    else:
        for line in _lines(floor, design.name):
            typer.echo(line)


def aa_design(design: "Experiment", arm: str, reps: int | None) -> "Experiment":
    """The A/A experiment of `arm`: the experiment's tasks, repetitions and settings, with two
    conditions, the arm and its copy (`copy_name`), alike but for the name. It has no `[stopping]`
    (an A/A has no effect to stop on); its repetitions are `reps`, else the experiment's planned
    ones (`[stopping]`'s max_repetitions where it sets them: the fixed design it was planned for)."""
    from rig.analysis import copy_name
    from rig.analysis.noise import aa_name
    from rig.schema import Experiment

    condition = next(c for c in design.conditions if c.name == arm).model_dump()
    planned = design.planned_repetitions
    data = design.model_dump()
    data.update(
        name=aa_name(design.name, arm, reps if reps not in (None, planned) else None),
        title=f"A/A: condition {arm} of {design.name}, twice",
        conditions=[condition, {**condition, "name": copy_name(arm)}],
        stopping=None,
        repetitions=reps or planned,
    )
    return Experiment.model_validate(data)


def _run_aa(
    path: Path,
    design: "Experiment",
    tasks: "list[Task]",
    arm: str,
    reps: int | None,
    results_root: Path | None,
    keep_workspaces: bool,
    sandbox: str,
    quiet: bool,
) -> Path:
    """Run (or resume) the A/A experiment of `arm` as `rig run` runs an experiment; its results folder."""
    from rig import paths
    from rig.cli.run import _run

    derived = aa_design(design, arm, reps)
    root = paths.results_root(path, results_root)
    for check in _preflight(derived, tasks, root, sandbox):
        if check.note:
            typer.echo(f"preflight: {check.line}", err=True)
    ctx = context_for(derived, tasks, root, keep_workspaces, sandbox)
    # The same runner, progress, status and Ctrl-C handling as `rig run`; with --json its
    # printing goes to stderr, leaving stdout to the JSON.
    with _stdout_to_stderr(quiet), store_errors():
        _run(ctx)
    return ctx.store.root


@contextlib.contextmanager
def _stdout_to_stderr(active: bool) -> Iterator[None]:
    if not active:
        yield
        return
    with contextlib.redirect_stdout(sys.stderr):
        yield


def _preflight(design: "Experiment", tasks: "list[Task]", root: Path, sandbox: str):
    """`rig run`'s preflight checks of the A/A experiment; the first failure ends the command."""
    import shlex

    from rig.run.preflight import PreflightError, preflight
    from rig.workspace.build import default_runs_root

    hint = "`rig calibrate" + (f" --pack {shlex.quote(design.pack)}`" if design.pack else "`")
    try:
        return preflight(design, tasks, root, default_runs_root(), sandbox, hint)
    except PreflightError as exc:
        raise fail(str(exc)) from None


def _read_one(folder: Path):
    from rig.analysis import PoolingError, load_runs

    try:
        with store_errors(), report_warnings():
            return load_runs(folder, paths=False)
    except (PoolingError, ValueError) as exc:  # RecordSchemaError is a ValueError
        raise fail(str(exc)) from exc


def _read_two(folders: list[Path], arm: str, allow_mixed_pins: bool):
    from rig.analysis import PoolingError, two_runs

    try:
        with store_errors(), report_warnings():
            return two_runs(folders, arm, allow_mixed_pins=allow_mixed_pins)
    except (PoolingError, ValueError) as exc:
        raise fail(str(exc)) from exc


def _analyse(df, a: str, b: str, estimand: str, reps: int, sims: int, seed: int) -> "NoiseFloor":
    from rig.analysis import noise_floor

    try:
        return noise_floor(df, a, b, estimand=estimand, reps=reps, n_sim=sims, seed=seed)
    except ValueError as exc:
        raise fail(str(exc)) from exc


def _points(value: float, sign: str = "+") -> str:
    """A difference in success rate in percentage points (no unit), e.g. +6.7; a dash for NaN."""
    return "—" if math.isnan(value) else f"{value * 100:{sign}.1f}"


def _lines(floor: "NoiseFloor", experiment: str) -> list[str]:
    """The noise floor in a few plain lines."""
    from rig.analysis import POPULATION

    d = floor.difference
    scope = "tasks like these" if floor.estimand == POPULATION else "exactly these tasks"
    ci = (
        "no interval"
        if math.isnan(d.ci_low) or math.isnan(d.ci_high)
        else f"95% CI [{_points(d.ci_low)}, {_points(d.ci_high)}] pp"
    )
    lines = [
        f"A/A of condition {floor.a} of {experiment}: {floor.b} vs {floor.a}, {floor.n_tasks} tasks, "
        f"{d.n_a} / {d.n_b} runs",
        f"observed difference: {_points(d.effect)} pp, {ci} ({floor.estimand}: {scope}), p = {d.p_value:.3g} "
        f"({d.test})",
        f"false-positive rate: {floor.false_positive_rate:.3f} [{floor.fpr_low:.3f}, {floor.fpr_high:.3f}] "
        f"of {floor.simulations} simulated experiments with no difference had p < {floor.alpha:g} "
        f"(each task at its rate pooled over both copies, {floor.n_tasks} tasks x {floor.reps} runs "
        "per copy)",
        f"minimal detectable effect: {_points(floor.mde, '')} pp at power {floor.power:g}, alpha "
        f"{floor.alpha:g}, {floor.n_tasks} tasks x {floor.reps} repetitions (base rate "
        f"{floor.base_rate * 100:.1f}%, the A/A's; task spread {floor.task_spread:.2f} on the logit "
        "scale, from its tasks' rates)",
    ]
    if floor.note:
        lines.append(f"note: {floor.note}")
    return lines
