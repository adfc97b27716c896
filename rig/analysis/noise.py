"""The noise floor of an experiment: one arm run twice (an A/A experiment) and what it implies.

Two copies of one condition differ only by chance, so an A/A experiment answers three questions
about the A/B experiment it was made from (docs/noise-floor.md):

- **the observed difference** between the copies, with the 95% interval and p-value
  `compare_success` gives any A/B (for the estimand asked: POPULATION, tasks like these, or
  THESE_TASKS): how large a difference chance alone produced here;
- **the false-positive rate the design implies**: experiments with *no* difference are simulated,
  each task succeeding at its rate as observed pooled over both copies, with the same tasks and
  runs per task, and each is analysed with the very same `compare_success`; the share with p < alpha
  (and its Monte Carlo interval) is how often this design would report an effect that is not there.
  An exact test keeps it at most alpha; a test that leans on asymptotics over few tasks may not;
- **the minimal detectable effect** (`rig.analysis.power.min_detectable_effect`): the smallest
  difference in success rate that the same test finds with 80% power at the experiment's size, with
  the A/A's pooled success rate as the base rate and the spread of its tasks' rates (binomial noise
  taken out, `task_spread_for`) as the task spread.

The copies are conditions `NAME` and `NAME.again` (`copy_name`): condition names may hold only
letters, digits and `_.-`, so the copy's name is the arm's with a suffix, and the two cannot be the
same name; no other condition is in the A/A experiment.
"""

import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rig.analysis.load import load_runs
from rig.analysis.power import min_detectable_effect, task_spread_for
from rig.analysis.stats import ESTIMANDS, POPULATION, Comparison, compare_success, wilson_interval

AGAIN = ".again"
# What `rig aa` names its results folder: `<experiment>-aa-<arm>` (`aa_name`).
AA_INFIX = "-aa-"


def copy_name(arm: str) -> str:
    """The second copy of `arm` in an A/A experiment: never the same name as the first."""
    return f"{arm}{AGAIN}"


def aa_name(experiment: str, arm: str, repetitions: int | None = None) -> str:
    """The A/A experiment of `arm` of `experiment` (its results folder's name): `<experiment>-aa-<arm>`,
    with `-r<N>` when it runs another number of repetitions than the experiment, so that changing
    them starts another A/A instead of being refused as a changed design."""
    return f"{experiment}{AA_INFIX}{arm}" + (f"-r{repetitions}" if repetitions is not None else "")


def aa_arm(design: dict[str, Any], experiment: str) -> str | None:
    """The arm a results folder's design (experiment.json's `experiment`) is the A/A experiment of,
    for `experiment`; None if it is not one: its name is not `<experiment>-aa-...`, or it does not
    hold exactly two conditions, an arm and its copy, alike in everything but the name."""
    name = str(design.get("name", ""))
    conditions = design.get("conditions")
    if not name.startswith(f"{experiment}{AA_INFIX}") or not isinstance(conditions, list):
        return None
    if len(conditions) != 2 or not all(isinstance(c, dict) for c in conditions):
        return None
    first, second = conditions
    arm = first.get("name")
    if not isinstance(arm, str) or second.get("name") != copy_name(arm):
        return None
    same = {k: v for k, v in first.items() if k != "name"} == {k: v for k, v in second.items() if k != "name"}
    return arm if same else None


@dataclass(frozen=True)
class NoiseFloor:
    """What an A/A experiment of `arm` says (module docstring). `difference` is `compare_success`
    of copy `b` against copy `a`; `false_positive_rate` the share of `simulations` no-difference
    experiments with p < `alpha`, [`fpr_low`, `fpr_high`] its Wilson 95% Monte Carlo interval;
    `mde` the smallest difference in success rate found with probability `power` at `n_tasks` x
    `reps` (NaN when none is: `note` says why), assuming `base_rate` and `task_spread` (the
    logit-scale spread of task difficulty of rig.analysis.power's model)."""

    arm: str
    a: str
    b: str
    estimand: str
    difference: Comparison
    alpha: float
    false_positive_rate: float
    fpr_low: float
    fpr_high: float
    simulations: int
    power: float
    mde: float
    base_rate: float
    task_spread: float
    n_tasks: int
    reps: int
    note: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """Plain values for JSON: NaN becomes None, the difference's per-task counts are kept."""
        return _plain(asdict(self))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float | np.floating):
        return None if math.isnan(value) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    return value


def _task_counts(comparison: Comparison) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per task both copies ran: successes and runs of copy a, then of copy b."""
    keys = ("successes_a", "n_a", "successes_b", "n_b")
    counts = np.array([[t[key] for key in keys] for t in comparison.per_task], dtype=np.int64).reshape(-1, 4)
    return counts[:, 0], counts[:, 1], counts[:, 2], counts[:, 3]


def false_positive_rate(
    rates: np.ndarray,
    n_a: np.ndarray,
    n_b: np.ndarray,
    a: str,
    b: str,
    *,
    estimand: str = POPULATION,
    alpha: float = 0.05,
    n_sim: int = 1000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Share of simulated no-difference experiments in which compare_success gives p < alpha, with
    its Wilson 95% Monte Carlo interval: (rate, low, high).

    Task t succeeds with probability `rates[t]` in both arms, `n_a[t]` runs under `a` and `n_b[t]`
    under `b`. All experiments are drawn at once; compare_success's p depends only on the multiset
    of per-task counts (its tests and intervals are sums over tasks), so each distinct one is
    analysed once, as a frame of runs of its own, by compare_success itself.
    """
    rates, n_a, n_b = (np.asarray(x) for x in (rates, n_a, n_b))
    rng = np.random.default_rng(seed)
    k_a = rng.binomial(n_a, rates, size=(n_sim, len(rates)))
    k_b = rng.binomial(n_b, rates, size=(n_sim, len(rates)))
    base = int(max(n_a.max(), n_b.max())) + 1
    # One integer per task and experiment, sorted within each experiment: equal rows are equal multisets.
    codes = ((k_a * base + n_a) * base + k_b) * base + n_b
    distinct, counts = np.unique(np.sort(codes, axis=1), axis=0, return_counts=True)
    rejected = 0
    for row, count in zip(distinct, counts, strict=True):
        p = compare_success(_runs_frame(row, base, a, b), a, b, estimand).p_value
        # NaN (a single task: no test over tasks) rejects nothing.
        rejected += int(count) if p < alpha else 0
    low, high = wilson_interval(rejected, n_sim)
    return rejected / n_sim, low, high


def _runs_frame(row: np.ndarray, base: int, a: str, b: str) -> pd.DataFrame:
    """One row per run of an experiment given as `false_positive_rate`'s task codes."""
    rest, n_b = np.divmod(row, base)
    rest, k_b = np.divmod(rest, base)
    k_a, n_a = np.divmod(rest, base)
    task, condition, success = [], [], []
    for t, counts in enumerate(zip(k_a, n_a, k_b, n_b, strict=True)):
        for arm, (k, n) in ((a, counts[:2]), (b, counts[2:])):
            task += [t] * int(n)
            condition += [arm] * int(n)
            success += [True] * int(k) + [False] * int(n - k)
    return pd.DataFrame({"task": task, "condition": condition, "success": success})


def _spread(successes: np.ndarray, runs: np.ndarray, base_rate: float) -> float:
    """The logit-scale task spread of the tasks' pooled rates: their variance across tasks less the
    binomial noise of each task's runs (p (1 - p) / (n - 1) estimates it without bias), moments."""
    if len(runs) < 2 or not 0 < base_rate < 1:
        return 0.0
    rates = successes / runs
    noise = float(np.mean(rates * (1 - rates) / (runs - 1)))
    return task_spread_for(base_rate, float(np.var(rates, ddof=1)) - noise)


def noise_floor(
    df: pd.DataFrame,
    a: str,
    b: str,
    *,
    estimand: str = POPULATION,
    reps: int | None = None,
    alpha: float = 0.05,
    power: float = 0.8,
    n_sim: int = 1000,
    power_sims: int = 400,
    seed: int = 0,
) -> NoiseFloor:
    """The noise floor of an A/A experiment: runs of one arm as two conditions `a` and `b` of `df`
    (one row per run, as `load_runs` returns; `b` is `copy_name(a)` in what `rig aa` writes).

    The difference is `compare_success(df, a, b, estimand)`. The false-positive rate simulates
    `n_sim` experiments with no difference over the tasks both copies ran, each at its rate pooled
    over both, with each task's observed runs per copy, or `reps` per task per copy when given (the
    A/B experiment's repetitions, when the A/A ran another number). The minimal detectable effect is
    `min_detectable_effect` at those tasks x `reps` (default: the mean runs per task per copy,
    rounded), at the pooled success rate, with the task spread estimated from the pooled per-task
    rates (`_spread`), `power_sims` simulations per candidate. Everything is seeded by `seed`;
    `n_sim` 0 simulates no false positives (rate and interval NaN), for a reader that needs only the
    difference and the MDE, such as the report.
    A non-binary success column is refused (`binary_outcomes`).
    """
    if estimand not in ESTIMANDS:
        raise ValueError(f"unknown estimand {estimand!r}; use {' or '.join(map(repr, ESTIMANDS))}")
    difference = compare_success(df, a, b, estimand)
    k_a, n_a, k_b, n_b = _task_counts(difference)
    notes = [difference.note] if difference.note else []
    n_tasks = len(k_a)
    if n_tasks == 0:
        raise ValueError(f"no task was run under both {a} and {b}: no A/A difference to measure")
    successes, runs = k_a + k_b, n_a + n_b
    if reps is None:
        reps = max(1, round(float(runs.sum()) / (2 * n_tasks)))
        sim_a, sim_b = n_a, n_b
    else:
        sim_a = sim_b = np.full(n_tasks, reps)
    rate = low = high = math.nan
    if n_sim > 0:
        rate, low, high = false_positive_rate(
            successes / runs, sim_a, sim_b, a, b, estimand=estimand, alpha=alpha, n_sim=n_sim, seed=seed
        )
    base_rate = float(successes.sum() / runs.sum())
    spread = _spread(successes, runs, base_rate)
    mde = math.nan
    if not 0 < base_rate < 1:
        notes.append(
            f"every run {'passed' if base_rate == 1 else 'failed'}: no base rate to plan an effect from"
        )
    else:
        mde = min_detectable_effect(
            base_rate, n_tasks, reps, alpha, power, power_sims, seed, spread, estimand=estimand
        )
        if math.isnan(mde):
            notes.append(
                f"no difference in success rate is found with power {power:g} at {n_tasks} tasks x "
                f"{reps} repetitions"
            )
    return NoiseFloor(
        arm=a,
        a=a,
        b=b,
        estimand=estimand,
        difference=difference,
        alpha=alpha,
        false_positive_rate=rate,
        fpr_low=low,
        fpr_high=high,
        simulations=n_sim,
        power=power,
        mde=mde,
        base_rate=base_rate,
        task_spread=spread,
        n_tasks=n_tasks,
        reps=reps,
        note="; ".join(notes) or None,
    )


def two_runs(results: Sequence[Path | str], arm: str, *, allow_mixed_pins: bool = False) -> pd.DataFrame:
    """The runs of `arm` in two results folders as one A/A frame: the first folder's as condition
    `arm`, the second's as `copy_name(arm)` (`df.attrs["conditions"]` says so).

    Both are read together by `load_runs`, so their pins must agree as in any comparison (a
    differing harness version, model or rig version would be a difference between the copies), unless
    `allow_mixed_pins`. ValueError when the folders are not two, or one has no run of `arm`.
    """
    if len(results) != 2:
        raise ValueError(f"give two results folders, got {len(results)}")
    df = load_runs(list(results), allow_mixed_pins=allow_mixed_pins, paths=False)
    df = df[(df["condition"] == arm).to_numpy()]
    # A run belongs to the folder its attempt folder is in (load_runs makes the paths real).
    second = os.path.realpath(results[1]) + os.sep
    in_second = np.array([str(path).startswith(second) for path in df["artifacts"]], dtype=bool)
    for folder, mine in ((results[0], ~in_second), (results[1], in_second)):
        if not mine.any():
            raise ValueError(f"{folder} has no scored run of condition {arm!r}")
    df = df.assign(condition=np.where(in_second, copy_name(arm), arm))
    df.attrs["conditions"] = [arm, copy_name(arm)]
    return df.reset_index(drop=True)
