"""`rig import inspect|harbor|atif|table`: other tools' results as a rig results folder."""

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from rig.cli.common import fail
from rig.cli.main import app

if TYPE_CHECKING:
    from rig.ingest.common import Source

import_app = typer.Typer(
    help="Import other tools' results (Inspect AI logs, Harbor jobs, ATIF trajectories, tables) as a "
    "results folder that rig report, rig view and load_runs read as rig's own (docs/importing.md).",
    no_args_is_help=True,
)
app.add_typer(import_app, name="import")

OutOption = Annotated[
    Path,
    typer.Option(
        "--out",
        help="The results folder to write. Importing the same inputs again leaves it as it is; another "
        "import there is refused unless --replace.",
    ),
]
NameOption = Annotated[
    str | None, typer.Option("--name", help="The experiment's name (default: the --out folder's name).")
]
ReferenceOption = Annotated[
    str | None,
    typer.Option(
        "--reference", help="The reference condition (default: the first NAME, or a table's first)."
    ),
]
EstimandOption = Annotated[
    str,
    typer.Option(
        help="The question the comparisons answer: population (tasks like these) or these_tasks "
        "(exactly the tasks run)."
    ),
]
ReplaceOption = Annotated[
    bool, typer.Option("--replace", help="Replace another import in --out (never a rig run's results).")
]


def _runs(count: int) -> str:
    return f"{count} run" if count == 1 else f"{count} runs"


def _import(
    read: "Callable[[], Source]",
    out: Path,
    name: str | None,
    reference: str | None,
    estimand: str,
    replace: bool,
) -> None:
    """Read the source, write the folder, say what was written; every bad input ends in one line."""
    from typing import get_args

    from rig.ingest.common import IngestError, write_import
    from rig.schema.experiment import Estimand
    from rig.store.results import StoreError

    if estimand not in get_args(Estimand):
        raise fail(f"unknown estimand {estimand!r}; use {' or '.join(get_args(Estimand))}")
    try:
        source = read()
        written = write_import(
            source, out, name=name, reference=reference, estimand=estimand, replace=replace
        )
    except (IngestError, StoreError) as exc:
        raise fail(str(exc)) from None
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        raise fail(f"{where}{exc.strerror or exc}; fix that and import again (nothing was written)") from None
    infra = sum(written.infrastructure.values())
    rules = ", ".join(f"{rule} {n}" for rule, n in sorted(written.infrastructure.items()))
    arms = f"{len(written.conditions)} conditions (reference {written.conditions[0]!r})"
    what = f"{written.scored} runs of {arms} x {written.tasks} tasks"
    if infra:
        what += (
            f"; {_runs(infra)} of infrastructure quarantined ({rules}) and {_runs(written.excluded)} of "
            "the other arms excluded with them (quarantine.jsonl)"
        )
    if written.unchanged:
        typer.echo(f"{written.folder} already holds this import, unchanged: {what}")
    else:
        typer.echo(f"imported into {written.folder}: {what}")


@import_app.command("inspect")
def import_inspect(
    logs: Annotated[
        list[str],
        typer.Argument(
            metavar="NAME=LOG...", help="One Inspect eval log (.eval or .json) per condition: NAME=LOG."
        ),
    ],
    out: OutOption,
    scorer: Annotated[
        str | None, typer.Option(help="The scorer whose value is the outcome (default: the first).")
    ] = None,
    name: NameOption = None,
    reference: ReferenceOption = None,
    estimand: EstimandOption = "population",
    replace: ReplaceOption = False,
) -> None:
    """Inspect AI eval logs: samples as tasks, epochs as repetitions, the score as the outcome (C 1, I 0,
    P 0.5, N 0; fractional: partial credit), model usage as tokens; errored, cancelled or limit-hit
    samples are infrastructure."""
    from rig.ingest.common import parse_inputs
    from rig.ingest.inspect import read_logs

    _import(lambda: read_logs(parse_inputs(logs, "LOG"), scorer), out, name, reference, estimand, replace)


@import_app.command("harbor")
def import_harbor(
    jobs: Annotated[
        list[str], typer.Argument(metavar="NAME=JOB_DIR...", help="One Harbor job folder per condition.")
    ],
    out: OutOption,
    reward: Annotated[
        str | None,
        typer.Option(help="The verifier reward that is the outcome (default: `reward`, or the only one)."),
    ] = None,
    name: NameOption = None,
    reference: ReferenceOption = None,
    estimand: EstimandOption = "population",
    replace: ReplaceOption = False,
) -> None:
    """Harbor job folders: each trial a run (its task, agent, model, reward, tokens and cost); a trial
    with an exception, or without a reward, is infrastructure."""
    from rig.ingest.common import parse_inputs
    from rig.ingest.harbor import read_jobs

    _import(lambda: read_jobs(parse_inputs(jobs, "JOB_DIR"), reward), out, name, reference, estimand, replace)


@import_app.command("atif")
def import_atif(
    trajectories: Annotated[
        list[str],
        typer.Argument(
            metavar="NAME=FILE_OR_DIR...",
            help="One ATIF trajectory, or a folder of them, per condition.",
        ),
    ],
    out: OutOption,
    name: NameOption = None,
    reference: ReferenceOption = None,
    estimand: EstimandOption = "population",
    replace: ReplaceOption = False,
) -> None:
    """ATIF trajectories, validated with the atif package: the final metrics as usage, the outcome from
    `rig export`'s verdict, the Harbor trial around it, or the trajectory's extra.task and extra.reward."""
    from rig.ingest.atif import read_trajectories
    from rig.ingest.common import parse_inputs

    _import(
        lambda: read_trajectories(parse_inputs(trajectories, "FILE_OR_DIR")),
        out,
        name,
        reference,
        estimand,
        replace,
    )


@import_app.command("table")
def import_table(
    file: Annotated[Path, typer.Argument(help="A .csv, .json, .jsonl or .parquet table.")],
    out: OutOption,
    task: Annotated[str, typer.Option("--task", help="The column naming each row's task.")],
    condition: Annotated[str, typer.Option("--condition", help="The column naming each row's condition.")],
    group: Annotated[
        str | None,
        typer.Option("--group", help="A column of a further stratum (a harness-model configuration)."),
    ] = None,
    success: Annotated[
        str | None, typer.Option("--success", help="Outcome per run: 0/1 or true/false.")
    ] = None,
    successes: Annotated[
        str | None, typer.Option("--successes", help="Counts per cell: the successes (with --trials).")
    ] = None,
    trials: Annotated[
        str | None, typer.Option("--trials", help="Counts per cell: the runs (with --successes).")
    ] = None,
    score: Annotated[
        str | None,
        typer.Option("--score", help="Outcome per run: a score in [0, --score-max], partial credit."),
    ] = None,
    score_max: Annotated[
        float | None, typer.Option("--score-max", help="The best score (default 1).")
    ] = None,
    name: NameOption = None,
    reference: ReferenceOption = None,
    estimand: EstimandOption = "population",
    replace: ReplaceOption = False,
) -> None:
    """A table of outcomes: one row per run (--success or --score), or counts per cell (--successes and
    --trials, expanded into one run per trial)."""
    from rig.ingest.common import IngestError
    from rig.ingest.table import Columns, read_table

    columns = Columns(task, condition, group, success, successes, trials, score, score_max)
    if not file.is_file():
        raise fail(f"{file}: no such file; give the table to import")
    try:
        columns.check()
    except IngestError as exc:
        raise fail(str(exc)) from None
    _import(lambda: read_table(file, columns), out, name, reference, estimand, replace)
