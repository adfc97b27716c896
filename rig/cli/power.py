"""`rig power`: how many tasks and repetitions an effect needs."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    pass

from rig.cli.common import fail, load_design
from rig.cli.main import app


@app.command()
def power(
    tasks: Annotated[int, typer.Option(min=1, help="Tasks in the design.")] = 5,
    base_rate: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Success rate of the reference arm.")
    ] = 0.5,
    effect: Annotated[float, typer.Option(help="Difference in success rate to detect (b - a).")] = 0.2,
    cost_ratio: Annotated[
        float | None, typer.Option(help="Also: ratio of median costs to detect (e.g. 0.7).")
    ] = None,
    cost_sigma: Annotated[float, typer.Option(help="Log-normal sigma of per-run cost.")] = 0.5,
    alpha: Annotated[float, typer.Option(help="Significance level.")] = 0.05,
    target: Annotated[float, typer.Option(help="Power wanted.")] = 0.8,
    sims: Annotated[int, typer.Option(min=50, help="Simulated experiments per design.")] = 400,
    seed: int = 0,
    max_reps: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Also: the sequential design of [stopping] with at most this many repetitions "
            "(expected and maximum runs at --effect and at no effect).",
        ),
    ] = None,
    min_effect: Annotated[
        float | None, typer.Option(help="[stopping]'s smallest effect worth detecting (default: --effect).")
    ] = None,
    experiment: Annotated[
        Path | None,
        typer.Option(
            help="Take the sequential design from this experiment's [stopping] (its tasks, conditions, "
            "alpha, min_effect, max_repetitions and estimand)."
        ),
    ] = None,
    estimand: Annotated[
        str,
        typer.Option(
            help="The question the test answers: population (tasks like these: the Wald t-test of the "
            "task-clustered difference) or these_tasks (the tasks run: the exact test)."
        ),
    ] = "population",
) -> None:
    """Repetitions per task needed to detect an effect, by simulating the experiment's design; with
    --max-reps or --experiment, also the runs a sequential ([stopping]) design uses."""
    from rig.analysis import ESTIMANDS, reps_for_power, reps_for_power_cost

    if estimand not in ESTIMANDS:
        raise fail(f"unknown estimand {estimand!r}; use {' or '.join(ESTIMANDS)}")
    conditions = 2
    if experiment is not None:
        tasks, conditions, alpha, min_effect, max_reps, estimand = _stopping_design(experiment)
    try:
        reps = reps_for_power(
            base_rate, effect, tasks, alpha=alpha, target=target, n_sim=sims, seed=seed, estimand=estimand
        )
    except ValueError as exc:
        raise fail(str(exc)) from exc
    typer.echo(
        f"success {base_rate:.2f} -> {base_rate + effect:.2f} over {tasks} tasks: "
        f"{reps} repetitions per task per condition for power {target:.2f} at alpha {alpha} "
        f"({'tasks like these' if estimand == 'population' else 'these tasks'}: estimand {estimand})"
    )
    if max_reps is not None:
        _sequential_power(
            base_rate, effect, tasks, conditions, alpha, min_effect or effect, max_reps, sims, seed
        )
    if cost_ratio is not None:
        try:
            cost_reps = reps_for_power_cost(
                cost_ratio, cost_sigma, tasks, alpha=alpha, target=target, n_sim=sims, seed=seed
            )
        except ValueError as exc:
            raise fail(str(exc)) from exc
        typer.echo(
            f"median cost x{cost_ratio:.2f} (sigma {cost_sigma}) over {tasks} tasks: "
            f"{cost_reps} repetitions per task per condition for power {target:.2f} at alpha {alpha}"
        )


def _stopping_design(path: Path) -> tuple[int, int, float, float, int, str]:
    """(tasks, conditions, alpha, min_effect, max repetitions, estimand) of an experiment's [stopping]."""
    exp, tasks = load_design(path)
    if exp.stopping is None:
        raise fail(f"{path} has no [stopping] table; add one, or give --max-reps instead")
    stop = exp.stopping
    return len(tasks), len(exp.conditions), stop.alpha, stop.min_effect, exp.planned_repetitions, exp.estimand


def _sequential_power(
    base_rate: float,
    effect: float,
    tasks: int,
    conditions: int,
    alpha: float,
    min_effect: float,
    max_reps: int,
    sims: int,
    seed: int,
) -> None:
    """Print the sequential design's power and runs at `effect` and at no effect, by simulation."""
    from rig.analysis import power_success
    from rig.analysis.sequential import simulate_sequential

    try:
        at_effect, at_none = (
            simulate_sequential(
                base_rate, e, tasks, max_reps, min_effect, alpha, sims, seed, n_conditions=conditions
            )
            for e in (effect, 0.0)
        )
        # [stopping] decides about these tasks: its fixed design is tested the same way.
        fixed = power_success(
            base_rate, effect, tasks, max_reps, alpha=alpha, n_sim=sims, seed=seed, estimand="these_tasks"
        )
    except ValueError as exc:
        raise fail(str(exc)) from exc
    typer.echo(
        f"sequential design ([stopping]: min_effect {min_effect:g}, alpha {alpha:g}, at most {max_reps} "
        f"repetitions, {tasks} tasks x {conditions} conditions; fixed design {at_effect.fixed_runs} runs):"
    )
    for label, sim in ((f"effect {effect:+.2f}", at_effect), ("no effect", at_none)):
        typer.echo(
            f"  at {label}: effect found {sim.rejected:.3f}, no effect of min_effect {sim.no_effect:.3f}; "
            f"runs expected {sim.expected_runs:.1f}, at most {sim.max_runs} (of {sim.fixed_runs})"
        )
    typer.echo(f"  the fixed design of {max_reps} repetitions has power {fixed:.3f} at effect {effect:+.2f}")
