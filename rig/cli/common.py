"""What the commands share: one-line errors, loading an experiment and its results folder."""

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from rig.schema import Experiment, PlanItem, Task
    from rig.store.results import ResultsStore


def fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


@contextmanager
def store_errors() -> Iterator[None]:
    """A results file the store cannot use (corrupt line, full disk) ends the command in one line."""
    from rig.store.results import StoreError

    try:
        yield
    except StoreError as exc:
        raise fail(str(exc)) from None
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        raise fail(f"{where}{exc.strerror or exc}; fix that (free space?), then rerun to resume") from None


def _interrupt(signum: int, frame: object) -> None:
    """The first Ctrl-C or SIGTERM: every later one is ignored, so that none lands inside the
    cleanup the KeyboardInterrupt starts (killing the commands in flight, removing scratch folders)
    and leaves it half done; `timeout` and an impatient user send a second one within milliseconds."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


@contextmanager
def interruptible() -> Iterator[None]:
    """Ctrl-C and SIGTERM raise KeyboardInterrupt inside the block, whatever the parent set.

    A shell's background job and nohup start a command with SIGINT ignored; a long-running command
    that relied on the inherited handling could then be stopped only with SIGKILL.
    """
    import signal

    previous = (
        signal.signal(signal.SIGINT, _interrupt),
        signal.signal(signal.SIGTERM, _interrupt),
    )
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])


@contextmanager
def setup_errors() -> Iterator[None]:
    """Turn what stops an experiment's setup (its design, pack, tasks, workspace, store, harness,
    sandbox, network or environment) into one error line and exit 2."""
    from harnesses.protocol import CliNotFound
    from harnesses.registry import HarnessUnavailable
    from rig.confine.network import NetworkError
    from rig.confine.sandbox import SandboxError
    from rig.env.uvtool import EnvError
    from rig.experiment.load import ExperimentError
    from rig.packs.manifest import PackError
    from rig.packs.tasks import TaskError
    from rig.store.results import StoreError
    from rig.workspace.build import WorkspaceError

    try:
        yield
    except (
        ExperimentError,
        PackError,
        TaskError,
        WorkspaceError,
        StoreError,
        HarnessUnavailable,
        CliNotFound,
        SandboxError,
        NetworkError,
        EnvError,
    ) as exc:
        # CliNotFound includes HarnessVersionError: a harness whose version cannot be pinned.
        raise fail(str(exc)) from exc


def load_design(experiment_path: Path) -> tuple["Experiment", "list[Task]"]:
    """The experiment file's design and the tasks of its pack it names, or one error line."""
    from rig.experiment.load import load_experiment
    from rig.packs.manifest import load_pack
    from rig.packs.tasks import load_tasks

    with setup_errors():
        experiment = load_experiment(experiment_path)
        only = None if experiment.tasks == "all" else list(experiment.tasks)
        return experiment, load_tasks(load_pack(experiment.pack), only)


def context_for(
    experiment: "Experiment",
    tasks: "list[Task]",
    results_root: Path,
    keep_workspaces: bool = False,
    sandbox: str = "auto",
    adds_runs: bool = True,
):
    """The run context of `experiment` on `tasks`, its results under `results_root`, as `rig run`
    makes one; one error line for what stops it."""
    from rig import paths
    from rig.run.runner import make_context
    from rig.workspace.build import default_runs_root

    with setup_errors():
        return make_context(
            experiment,
            tasks,
            results_root,
            default_runs_root(),
            paths.REPO_ROOT,
            keep_workspaces,
            sandbox,
            notify=lambda message: typer.echo(message, err=True),
            adds_runs=adds_runs,
        )


def load_context(
    experiment_path: Path,
    results_root: Path | None,
    keep_workspaces: bool = False,
    sandbox: str = "auto",
    adds_runs: bool = True,
):
    """The run context of the experiment file at `experiment_path` (its design, pack and tasks)."""
    from rig import paths

    experiment, tasks = load_design(experiment_path)
    return context_for(
        experiment,
        tasks,
        paths.results_root(experiment_path, results_root),
        keep_workspaces,
        sandbox,
        adds_runs,
    )


@dataclass(frozen=True)
class ReadOnlyContext:
    """What `rig status` needs of an experiment: its design, its plan and its results store."""

    experiment: "Experiment"
    items: "list[PlanItem]"
    store: "ResultsStore"


def read_only_context(experiment_path: Path, results_root: Path | None) -> ReadOnlyContext:
    """The experiment and its results as they are, without writing anything or starting a harness.

    `load_context` prepares a run: it pins every input (starting the harness CLI for its version),
    creates the runs folder and binds the results folder to the design. A reader needs none of that,
    and must not do it: it may run beside a running experiment, on a read-only copy of the results,
    or on a machine without the harness. The design is still checked against experiment.json
    (read only), so a changed config is refused here as `rig run` would refuse it.
    """
    import json

    from rig import paths
    from rig.experiment.plan import plan
    from rig.store.migrate import design_digest
    from rig.store.results import ResultsStore

    experiment, tasks = load_design(experiment_path)
    store = ResultsStore(paths.results_root(experiment_path, results_root) / experiment.name)
    design = store.root / "experiment.json"
    if design.is_file():
        try:
            stored = json.loads(design.read_text())
            digest = design_digest(stored) if isinstance(stored, dict) else None
        except (OSError, ValueError) as exc:
            raise fail(f"{design}: cannot read it ({exc}); restore it from a backup") from exc
        if digest != experiment.digest():
            raise fail(
                f"{store.root} holds results of a different design of {experiment.name!r}; "
                "give the changed experiment a new name, or move the old results away"
            )
    return ReadOnlyContext(experiment, plan(experiment, [t.id for t in tasks]), store)


@contextmanager
def report_warnings() -> Iterator[None]:
    """Print the rig's warnings about the results read (duplicate records dropped) as `warning:` lines.

    Printed only when the command succeeds: a failing command keeps its one-line `error:`.
    """
    import warnings

    from rig.store.migrate import DuplicateRunWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DuplicateRunWarning)
        yield
    shown: set[str] = set()
    for w in caught:
        if not issubclass(w.category, DuplicateRunWarning):
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
        elif str(w.message) not in shown:
            shown.add(str(w.message))
            typer.echo(f"warning: {w.message}", err=True)


ResultsOption = Annotated[
    Path | None,
    typer.Option(
        "--results-root",
        help="Default: $RIG_RESULTS_ROOT, else experiments/results/ for an experiment in the checkout's "
        "experiments/, else ./rig-results/.",
    ),
]


def results_folder(experiment_path: Path, results_root: Path | None) -> Path:
    """The results folder `rig run` wrote for the experiment at `experiment_path`, or
    `experiment_path` itself when it is a results folder (of `rig run` or `rig import`); it must
    hold runs."""
    from rig import paths
    from rig.experiment.load import ExperimentError, load_experiment

    if experiment_path.is_dir():
        if not (experiment_path / "runs.jsonl").is_file():
            raise fail(
                f"{experiment_path} is a folder without runs.jsonl; give an experiment file, or the "
                "results folder `rig run` or `rig import` wrote"
            )
        return experiment_path
    try:
        name = load_experiment(experiment_path).name
    except ExperimentError as exc:
        raise fail(str(exc)) from exc
    folder = paths.results_root(experiment_path, results_root) / name
    if not (folder / "runs.jsonl").is_file():
        raise fail(f"{folder} has no runs.jsonl; run `rig run {experiment_path}` first")
    return folder
