"""The statistics a report states: per-cell rates with intervals, and arm-vs-arm comparisons.

The design being analysed: a few tasks (strata), each run several times under each condition
(arm). Tasks differ a lot in difficulty, so every comparison is paired by task: only tasks present
in both arms are used, the success test is stratified by task, the metric test works on per-task
medians, and every interval for the tasks as sampled treats tasks (the unit we want to generalise
over) as the independent units.

Conventions: arm `a` is the reference, `b` the arm compared with it; a success effect is the
difference of rates b - a, a score effect the difference of mean scores b - a, a metric effect the
ratio of medians b / a; intervals are 95% (CONFIDENCE). The reference is named, never read off the
order of the rows: `compare_conditions` takes an explicit `reference`, else the first of its
`conditions` argument, else the experiments' declared order that `load_runs` records in the frame
(`df.attrs["conditions"]`); a frame with none of them is refused rather than compared in row order.

Outcomes: `success` is binary (0/1/True/False); every binary test and interval (`stratified_test`,
`compare_success`, `success_interval`, `cell_table`) refuses anything else in one line instead of
truncating it. A fractional outcome in [0, 1] per run (partial credit) goes in a `score` column and
is compared by `compare_score`: the pooled mean difference with the same task-clustered CR1 interval
as the success difference and the Wald t-test of that very estimand (`clustered_mean_difference`),
so its interval excludes 0 exactly when p < 0.05.

Strata and clusters are separate: `strata` (default ["task"]) are the columns the success test
conditions on jointly (one 2x2 table per distinct combination), `cluster` (default "task") the
column whose units the tasks-as-sampled intervals treat as independent. Pooling configurations of
one task set is strata ["task", "configuration"] with cluster "task": the test compares like with
like and the interval still counts each task once (clustering by task x configuration would treat
a task's configurations as independent draws and make the interval too narrow).

Metrics with no data in a comparison (the column absent, all NaN, or no values in one arm) give a
Comparison whose effect, interval and p-value are NaN with a note saying why; NaN p-values are left
out of the Holm family, so an absent metric never inflates the others' adjusted p-values.

Which success test runs when (`stratified_test`):

- the exact conditional test (an exact Cochran-Mantel-Haenszel test): given each task's 2x2
  margins, arm b's successes in that task follow a hypergeometric law under "no effect" (common
  odds ratio 1), whatever the task's own success rate is; the statistic is arm b's total successes,
  whose null law is the convolution of those hypergeometric laws; the two-sided p-value sums the
  probabilities of every total no more likely than the observed one (as Fisher's exact test and R's
  `mantelhaen.test(exact = TRUE)` do; with a single task it *is* Fisher's exact test). It is exact
  at any count, never anti-conservative, and cheap at the sizes of agent experiments (tens to
  hundreds of runs), so it is the test used whenever the convolution has at most
  EXACT_MAX_SUPPORT points;
- beyond that (tens of thousands of runs, where the asymptotics are excellent) the asymptotic
  Cochran-Mantel-Haenszel test (statsmodels `StratifiedTable.test_null_odds`, continuity-corrected).

Tasks whose outcome is constant across both arms (all pass or all fail) carry no information about
the difference and drop out of both tests; with no informative task the p-value is 1.

Intervals and their estimands (bench/coverage_intervals.py measures their coverage):

- POPULATION (the default, and what reports show): the effect over the population of tasks
  these were drawn from, i.e. the expected pooled difference (or ratio of pooled medians) if the
  experiment were rerun on fresh tasks like these. Its interval is a cluster-robust (task-clustered
  sandwich, CR1) interval: the effect's linearisation summed per task, variance
  m / (m - 1) * sum of squares over the m tasks, Student t quantile with m - 1 degrees of freedom.
  The uncertainty of a task's own runs is already in its per-task sum, so run noise counts once (the
  two-stage bootstrap used before counted it twice: 97-99% coverage at a nominal 95%). The ratio of
  medians, whose linearisation needs a density, takes the delete-a-task jackknife variance instead
  (CR3, the cluster-robust variance that holds up best with few clusters), same t quantile.
- THESE_TASKS (success only, `compare_success(..., estimand=THESE_TASKS)`): the pooled difference
  of the true success rates of exactly the tasks that were run; only run-to-run noise is
  uncertain. Interval: Newcombe's hybrid score (MOVER) interval with each arm's Wilson interval taken
  at its effective number of runs (the pooled rate's variance from the unbiased within-task
  variances, Kish's design effect), normal quantiles.
"""

import functools
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from rig.schema import ModelUsage

CONFIDENCE = 0.95
METRICS: tuple[str, ...] = ("success", "cost_usd", "total_tokens", "tool_calls", "wall_s")
# The fractional outcome (partial credit in [0, 1] per run): compared by `compare_conditions` when the
# frame has this column (right after success), by `compare_score` directly.
SCORE = "score"
# What the success test conditions on and what the intervals cluster by, unless told otherwise.
DEFAULT_STRATA: tuple[str, ...] = ("task",)
DEFAULT_CLUSTER = "task"
# Metrics a parser that could not read every usage figure (`metrics_complete` False) undercounts:
# such runs are left out of their medians and comparisons, as a missing value would be. They are
# the fields of a per-model usage (rig.schema.ModelUsage): tokens of each kind and cost.
USAGE_METRICS = frozenset(ModelUsage.model_fields)
# Points in the support of the exact test's statistic above which the asymptotic CMH test runs.
# The convolution costs at most support x largest stratum, i.e. well under a second at this size.
EXACT_MAX_SUPPORT = 20_000
EXACT_TEST = "exact conditional test (exact CMH, stratified by task)"
CMH_TEST = "Cochran-Mantel-Haenszel test (stratified by task, continuity-corrected)"
WILCOXON_TEST = "Wilcoxon signed-rank test on per-task medians"
WALD_TEST = "Wald t-test of the task-clustered mean difference (CR1)"
THESE_TASKS_Z_TEST = "z-test of the mean difference over these tasks' runs"
# Probabilities within this relative tolerance of the observed one count as "as likely": the
# floating-point guard of Fisher's exact test in R and scipy, so one stratum gives the same p.
_REL_TOL = 1 + 1e-7
POPULATION = "population"
THESE_TASKS = "these_tasks"
ESTIMANDS: tuple[str, ...] = (POPULATION, THESE_TASKS)

CELL_COLUMNS: tuple[str, ...] = (
    "task",
    "condition",
    "n",
    "successes",
    "success_rate",
    "ci_low",
    "ci_high",
    "mean_score",
    "median_cost_usd",
    "median_total_tokens",
    "median_tool_calls",
    "median_wall_s",
    "incomplete_metrics",
)


@dataclass
class Comparison:
    """Arm b against reference arm a on one metric, pooled over the tasks both arms ran.

    `effect` is rate_b - rate_a for success and mean_b - mean_a for score (`effect_kind`
    "difference"), median_b / median_a for the other metrics ("ratio"); [`ci_low`, `ci_high`] is
    its 95% interval for `estimand` (POPULATION or THESE_TASKS, see the module docstring);
    `p_value` comes from `test`, NaN when there was nothing to test (no data for the metric);
    `p_adjusted` is the Holm-adjusted p-value across all comparisons of one report that have a
    p-value (set by `compare_conditions`; NaN for those without). `n_tasks` counts the clusters
    used (tasks, unless another `cluster` was given), `n_a` and `n_b` the runs. `per_task` holds,
    for success, one entry per stratum {task, successes_a, n_a, successes_b, n_b, fisher_p}
    (Fisher's exact two-sided p of that stratum alone, unadjusted; `task` is the stratum's label:
    the task, or its strata values joined by " / "), for score {task, mean_a, n_a, mean_b, n_b}
    per cluster and for metrics {task, median_a, median_b, n_a, n_b} per cluster. `note` explains
    anything unusual (missing values, no test).
    """

    metric: str
    a: str
    b: str
    effect_kind: str
    effect: float
    ci_low: float
    ci_high: float
    p_value: float
    test: str
    p_adjusted: float | None = None
    n_tasks: int = 0
    n_a: int = 0
    n_b: int = 0
    per_task: list[dict[str, Any]] = field(default_factory=list)
    note: str | None = None
    estimand: str = POPULATION


# -- intervals and cells ---------------------------------------------------------------------


def wilson_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a success rate of k successes in n runs (statsmodels').

    Unlike the textbook Wald interval it stays inside [0, 1] and keeps close to its nominal
    coverage at the small n and extreme rates of agent experiments (0/3, 10/10). n == 0 gives
    (0.0, 1.0): no runs, no information.
    """
    from statsmodels.stats.proportion import proportion_confint

    if n == 0:
        return (0.0, 1.0)
    if not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    low, high = proportion_confint(k, n, alpha=1 - confidence, method="wilson")
    # At k == 0 or k == n the bound is exactly 0 or 1; do not let rounding say otherwise.
    return (0.0 if k == 0 else float(low), 1.0 if k == n else float(high))


def newcombe_interval(ka: int, na: int, kb: int, nb: int) -> tuple[float, float, float]:
    """Difference of two success rates, kb/nb - ka/na, with Newcombe's hybrid-score 95% interval
    (statsmodels' `newcomb`, built from the arms' Wilson intervals); NaNs when an arm has no runs."""
    from statsmodels.stats.proportion import confint_proportions_2indep

    if na == 0 or nb == 0:
        return math.nan, math.nan, math.nan
    low, high = confint_proportions_2indep(kb, nb, ka, na, method="newcomb", alpha=1 - CONFIDENCE)
    return kb / nb - ka / na, float(low), float(high)


def _present(statistic: Callable[[np.ndarray], Any], values: np.ndarray) -> float:
    """`statistic` of the values that are not NaN; NaN when none is."""
    values = values[~np.isnan(values)]
    return float(statistic(values)) if len(values) else math.nan


def _incomplete(df: pd.DataFrame) -> pd.Series:
    """Which rows' usage metrics are incomplete (all False for a frame without the column)."""
    if "metrics_complete" not in df.columns:
        return pd.Series(False, index=df.index)
    return df["metrics_complete"].eq(False)


def usage_values(df: pd.DataFrame, metric: str) -> pd.Series:
    """The numeric values of `metric`, NaN where missing and, for a usage metric (USAGE_METRICS),
    where the run's metrics are incomplete: an undercount must not pass for a saving."""
    values = pd.to_numeric(df[metric], errors="coerce").astype(float)
    return values.mask(_incomplete(df)) if metric in USAGE_METRICS else values


def _missing_note(count: int, column: str) -> str:
    return f"column {column!r} has {count} missing values; drop those runs or give each a value"


def binary_outcomes(df: pd.DataFrame, column: str = "success") -> np.ndarray:
    """The 0/1 outcomes of `column` as integers, or a one-line ValueError.

    True/False and 0/1 (of any numeric dtype) are accepted; a fractional value (partial credit) is
    refused, naming the way to compare it (a `score` column), as is anything else, and a missing
    value: a binary test must never truncate an outcome it was not meant for.
    """
    if column not in df.columns:
        raise ValueError(f"no column {column!r}: a success comparison needs a 0/1 outcome per run")
    series = df[column]
    if series.dtype == bool:
        return series.to_numpy(dtype=np.int64)
    try:
        values = series.to_numpy(dtype=float, na_value=np.nan)
    except (TypeError, ValueError):
        raise ValueError(
            f"column {column!r} holds values other than 0/1/True/False; "
            "a binary test needs one of those per run"
        ) from None
    missing = np.isnan(values)
    if missing.any():
        raise ValueError(_missing_note(int(missing.sum()), column))
    bad = (values != 0) & (values != 1)
    if bad.any():
        example = float(values[bad][0])
        if ((values[bad] > 0) & (values[bad] < 1)).all():
            raise ValueError(
                f"column {column!r} holds fractional values (e.g. {example:g}); "
                f"compare it as a score (metric {SCORE!r}: a {SCORE!r} column of values in [0, 1])"
            )
        raise ValueError(f"column {column!r} holds values other than 0/1/True/False (e.g. {example:g})")
    return values.astype(np.int64)


def _whole_counts(values: Any, name: str) -> np.ndarray:
    """Counts of runs or successes as given, refusing fractional ones (a binary test cannot take them)."""
    array = np.asarray(values)
    if array.dtype.kind in "biu":
        return array
    array = array.astype(float)
    if not np.isfinite(array).all():
        raise ValueError(f"{name} holds missing or infinite values; counts must be whole numbers")
    if (array != np.round(array)).any():
        raise ValueError(
            f"{name} holds fractional values; compare fractional outcomes as a score (metric {SCORE!r})"
        )
    return array


def _these_tasks_bounds(k: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pooled rate over the last axis and its Wilson bounds at the effective number of runs.

    The pooled rate's variance given the tasks' true rates is V = sum_t k_t (n_t - k_t) / (n_t - 1)
    / N**2 (unbiased within each task; a task run once adds P (1 - P)); N_eff = P (1 - P) / V is
    Kish's effective size. Returns (rate, low, high) over the leading axes.
    """
    total = n.sum(axis=-1)
    rate = k.sum(axis=-1) / total
    # A task run once has no within-task variance estimate: its run counts as a draw at the pooled
    # rate, P (1 - P), which holds the spread between tasks as well and so errs wide (with every
    # task run once: the Wilson interval of N independent runs), never as certain (0).
    once = n == 1
    within = np.where(once, 0.0, k * (n - k) / np.maximum(n - 1, 1)).sum(axis=-1)
    variance = (within + once.sum(axis=-1) * rate * (1 - rate)) / total**2
    with np.errstate(divide="ignore", invalid="ignore"):
        n_eff = np.where(variance > 0, rate * (1 - rate) / variance, np.inf)
    # All runs failed or all passed: no spread to estimate, so the runs count as independent.
    n_eff = np.where((rate == 0) | (rate == 1), total, n_eff)
    low, high = _wilson_bounds(rate, n_eff)
    return rate, low, high


def pooled_rate_interval(
    successes: Sequence[int] | np.ndarray, n: Sequence[int] | np.ndarray
) -> tuple[float, float]:
    """95% interval of a pooled success rate over tasks like these (the ALL row of `cell_table`).

    One entry per task. The pooled rate P = sum k / sum n has the linearisation (k_t - n_t P) / N
    in task t; its CR1 variance m / (m - 1) * sum of squares over the m tasks gives a t interval
    with m - 1 degrees of freedom, clipped to [0, 1]: the same construction as `success_interval`,
    so runs of one task are not counted as independent evidence. With one task it is that task's
    Wilson interval; when every task has the same rate (no spread over tasks to estimate), the
    Wilson interval at the effective number of runs, as `success_interval` does.
    """
    k = _whole_counts(successes, "successes").astype(float)
    runs = _whole_counts(n, "runs").astype(float)
    keep = runs > 0
    k, runs = k[keep], runs[keep]
    m = len(k)
    if m == 0:
        return (0.0, 1.0)
    if m == 1:
        return wilson_interval(int(k[0]), int(runs[0]))
    rate, low, high = _these_tasks_bounds(k, runs)
    per_task = (k - runs * rate) / runs.sum()
    variance = float(np.square(per_task).sum()) * m / (m - 1)
    if variance < 1e-24:  # every task at the same rate, up to rounding
        return (float(low), float(high))
    half = _t_quantile(m) * math.sqrt(variance)
    return (max(0.0, float(rate) - half), min(1.0, float(rate) + half))


def cell_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per (task, condition) cell, then per condition over all tasks (task "ALL").

    Needs only `task`, `condition` and a binary `success` (`binary_outcomes`: a fractional one is
    refused). n runs, successes, success_rate = successes / n with its 95% interval (ci_low,
    ci_high): per cell the Wilson interval of its runs, for the ALL row the task-clustered interval
    of the pooled rate (`pooled_rate_interval`: tasks, not runs, are the independent units). Then,
    each only when its column is in `df` (the columns follow CELL_COLUMNS): the mean score (when
    any run has one), the
    medians of cost (NaN runs without a cost ignored), total tokens, tool calls and wall time, and
    the count of `incomplete_metrics` runs (from `metrics_complete`), which cost and tokens leave
    out (see `usage_values`) but which still count in n and successes. Rows follow the order tasks
    and conditions first appear in `df`.
    """
    for column in ("task", "condition"):
        if column not in df.columns:
            raise ValueError(f"no column {column!r}: a cell table needs task, condition and success")
    success = binary_outcomes(df)
    tasks = list(df["task"].unique())
    conditions = list(df["condition"].unique())
    # Positions, not index labels: a frame concatenated without ignore_index repeats labels.
    groups = df.groupby(["task", "condition"], sort=False).indices
    medians = [m for m in ("cost_usd", "total_tokens", "tool_calls", "wall_s") if m in df.columns]
    # load_runs' frame always has the column; runs measured by the rig leave it empty.
    has_score = SCORE in df.columns and bool(df[SCORE].notna().any())
    if has_score:
        _score_values(df)  # refuses values outside [0, 1]
    columns = [
        c
        for c in CELL_COLUMNS
        if not c.startswith(("median_", "mean_", "incomplete_"))
        or (c == "mean_score" and has_score)
        or c.removeprefix("median_") in medians
        or (c == "incomplete_metrics" and "metrics_complete" in df.columns)
    ]
    rows = []
    # Each column read once for the whole frame, then indexed per cell: a pandas call per cell and
    # metric took a minute for an import of 10,000 cells.
    medianed = {metric: usage_values(df, metric).to_numpy() for metric in medians}
    scores = pd.to_numeric(df[SCORE], errors="coerce").to_numpy(dtype=float) if has_score else None
    incomplete = _incomplete(df).to_numpy() if "metrics_complete" in df.columns else None

    def row(
        task: Any, condition: Any, positions: np.ndarray, interval: tuple[float, float] | None
    ) -> dict[str, Any]:
        n = len(positions)
        k = int(success[positions].sum())
        low, high = interval if interval is not None else wilson_interval(k, n)
        values: dict[str, Any] = {
            "task": task,
            "condition": condition,
            "n": n,
            "successes": k,
            "success_rate": k / n,
            "ci_low": low,
            "ci_high": high,
        }
        if scores is not None:
            values["mean_score"] = _present(np.mean, scores[positions])
        for metric, column in medianed.items():
            values[f"median_{metric}"] = _present(np.median, column[positions])
        if incomplete is not None:
            values["incomplete_metrics"] = int(incomplete[positions].sum())
        return values

    for task in tasks:
        for condition in conditions:
            positions = groups.get((task, condition))
            if positions is not None and len(positions):
                rows.append(row(task, condition, positions, None))
    task_codes = pd.factorize(df["task"])[0]
    condition_values = df["condition"].to_numpy()
    for condition in conditions:
        positions = np.flatnonzero(condition_values == condition)
        codes = task_codes[positions]
        per_task_n = np.bincount(codes)
        per_task_k = np.bincount(codes, weights=success[positions])
        interval = pooled_rate_interval(per_task_k.round(), per_task_n)
        rows.append(row("ALL", condition, positions, interval))
    return pd.DataFrame(rows, columns=columns)


# -- the stratified success test -------------------------------------------------------------


@functools.lru_cache(maxsize=65536)
def _null_pmf(n_a: int, n_b: int, m: int) -> tuple[int, np.ndarray]:
    """Law of arm b's successes in one task given its margins, with no effect: hypergeometric.

    n_a + n_b runs of which m succeeded; under odds ratio 1 every way of choosing which runs
    succeeded is equally likely, so arm b's count is hypergeometric. Returns (lowest value, pmf).
    """
    low, high = max(0, m - n_a), min(n_b, m)
    pmf = sps.hypergeom.pmf(np.arange(low, high + 1), n_a + n_b, m, n_b)
    pmf.setflags(write=False)
    return low, pmf


def _exact_conditional_p(k_b: np.ndarray, n_a: np.ndarray, n_b: np.ndarray, m: np.ndarray) -> float:
    law = np.ones(1)
    offset = 0
    for nat, nbt, mt in zip(n_a.tolist(), n_b.tolist(), m.tolist(), strict=True):
        low, pmf = _null_pmf(nat, nbt, mt)
        law = np.convolve(law, pmf)
        offset += low
    observed = law[int(k_b.sum()) - offset]
    # Dividing by the law's own total removes its rounding error, so that a p-value including
    # every outcome is exactly 1.0.
    return float(min(1.0, law[law <= observed * _REL_TOL].sum() / law.sum()))


def stratified_test(
    successes_a: Sequence[int] | np.ndarray,
    n_a: Sequence[int] | np.ndarray,
    successes_b: Sequence[int] | np.ndarray,
    n_b: Sequence[int] | np.ndarray,
    *,
    method: str = "auto",
) -> tuple[float, str]:
    """Two-sided p-value of "no difference in success between the arms", stratified.

    One entry per stratum in each sequence: a task by default, or each combination of the strata
    columns `compare_success(..., strata=[...])` conditions on (a task x configuration when
    configurations are pooled); the test conditions on each stratum's margins, so it has no use
    for clusters. Counts must be whole numbers: fractional "successes" (partial credit) are refused
    in one line, not truncated (compare them as a score). The exact conditional test (exact CMH)
    runs unless its support exceeds EXACT_MAX_SUPPORT points, then the asymptotic CMH test (see the
    module docstring); `method` "exact" or "cmh" forces one. Strata with a constant outcome, or
    missing an arm, are uninformative and dropped; with none left the p-value is 1.0. Returns
    (p, test name). This is the one success test of the rig: compare_success and power_success both
    call it.
    """
    ka = _whole_counts(successes_a, "successes_a").astype(np.int64)
    na = _whole_counts(n_a, "n_a").astype(np.int64)
    kb = _whole_counts(successes_b, "successes_b").astype(np.int64)
    nb = _whole_counts(n_b, "n_b").astype(np.int64)
    if not (ka.shape == na.shape == kb.shape == nb.shape) or ka.ndim != 1:
        raise ValueError("successes and run counts need one entry per task, in both arms")
    if (ka < 0).any() or (kb < 0).any() or (ka > na).any() or (kb > nb).any():
        raise ValueError("successes must be between 0 and the number of runs")
    m = ka + kb
    keep = (na > 0) & (nb > 0) & (m > 0) & (m < na + nb)
    if method not in ("auto", "exact", "cmh"):
        raise ValueError(f"unknown method {method!r}; use auto, exact or cmh")
    if method == "auto":
        support = int((np.minimum(nb, m) - np.maximum(0, m - na))[keep].sum()) + 1
        method = "exact" if support <= EXACT_MAX_SUPPORT else "cmh"
    name = EXACT_TEST if method == "exact" else CMH_TEST
    if not keep.any():
        return 1.0, name
    ka, na, kb, nb, m = ka[keep], na[keep], kb[keep], nb[keep], m[keep]
    if method == "exact":
        return _exact_conditional_p(kb, na, nb, m), name
    from statsmodels.stats.contingency_tables import StratifiedTable

    tables = np.stack([np.stack([kb, nb - kb]), np.stack([ka, na - ka])]).astype(float)
    result = StratifiedTable(tables).test_null_odds(correction=True)
    return float(result.pvalue), name


# -- comparisons -----------------------------------------------------------------------------


def _check_arms(df: pd.DataFrame, a: str, b: str) -> None:
    present = list(df["condition"].unique())
    for arm in (a, b):
        if arm not in present:
            raise ValueError(f"condition {arm!r} is not in the data; conditions: {', '.join(present)}")
    if a == b:
        raise ValueError(f"cannot compare condition {a!r} with itself")


def _columns(value: str | Sequence[str], what: str) -> list[str]:
    """`strata` or `cluster` as a list of column names (one name may be given as a string)."""
    names = [value] if isinstance(value, str) else list(dict.fromkeys(value))
    if not names:
        raise ValueError(f"{what} needs at least one column")
    return names


def _check_columns(df: pd.DataFrame, names: list[str], what: str) -> None:
    for name in names:
        if name not in df.columns:
            raise ValueError(
                f"{what} column {name!r} is not in the data; "
                f"the columns are {', '.join(map(str, df.columns))}"
            )
        if df[name].isna().any():
            raise ValueError(f"{what} column {name!r} has missing values; every run needs one")


def _codes(df: pd.DataFrame, names: list[str]) -> tuple[np.ndarray, list[Any]]:
    """Each row's group by the columns `names` jointly (codes in order of first appearance) and each
    group's label: the value itself for one column, the values joined by " / " for several."""
    if len(names) == 1:
        codes, uniques = pd.factorize(df[names[0]])
        return np.asarray(codes), list(uniques)
    codes, uniques = pd.MultiIndex.from_frame(df[names]).factorize()
    return np.asarray(codes), [" / ".join(map(str, u)) for u in uniques]


def _arm_sums(
    codes: np.ndarray, values: np.ndarray, is_b: np.ndarray, groups: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per group: (sum of values, runs) of arm a, then of arm b."""
    a = ~is_b
    return (
        np.bincount(codes, weights=values * a, minlength=groups),
        np.bincount(codes, weights=a, minlength=groups),
        np.bincount(codes, weights=values * is_b, minlength=groups),
        np.bincount(codes, weights=is_b, minlength=groups),
    )


def _estimand(df: pd.DataFrame, estimand: str | None) -> str:
    """The estimand asked for, else the one the experiment declares (`load_runs` records it in
    `df.attrs["estimand"]`), else POPULATION; ValueError for an unknown one."""
    chosen = estimand or df.attrs.get("estimand") or POPULATION
    if chosen not in ESTIMANDS:
        raise ValueError(f"unknown estimand {chosen!r}; use {' or '.join(map(repr, ESTIMANDS))}")
    return chosen


def _unit(cluster: str) -> str:
    return "task" if cluster == "task" else cluster


def _no_data(metric: str, a: str, b: str, kind: str, test: str, note: str, **fields: Any) -> Comparison:
    """A comparison with nothing to compare: NaN effect, interval and p-value (left out of Holm)."""
    nan = math.nan
    return Comparison(metric, a, b, kind, nan, nan, nan, nan, test, note=note, **fields)


def _t_quantile(n_tasks: int) -> float:
    """Student t quantile of the interval with n_tasks - 1 degrees of freedom; NaN for one task."""
    return float(sps.t.ppf(1 - (1 - CONFIDENCE) / 2, n_tasks - 1)) if n_tasks > 1 else math.nan


def _wilson_bounds(rate: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score bounds for rates at (possibly fractional or infinite) effective sizes n."""
    from statsmodels.stats.proportion import proportion_confint

    # An infinite effective size leaves no uncertainty: the bounds close on the rate, which
    # statsmodels (inf / inf) cannot say.
    finite = np.where(np.isinf(n), np.nan, n)
    with np.errstate(divide="ignore", invalid="ignore"):
        low, high = proportion_confint(rate * finite, finite, alpha=1 - CONFIDENCE, method="wilson")
    infinite = np.isinf(n)
    # At a rate of 0 or 1 the formula's bound lands a rounding error past the rate itself; an
    # interval that leaves out its own estimate would be drawn with a negative error bar.
    low, high = np.minimum(low, rate), np.maximum(high, rate)
    return np.where(infinite, rate, low), np.where(infinite, rate, high)


def success_interval(
    successes_a: np.ndarray,
    n_a: np.ndarray,
    successes_b: np.ndarray,
    n_b: np.ndarray,
    estimand: str = POPULATION,
) -> tuple[np.ndarray, np.ndarray]:
    """95% interval of the pooled difference rate_b - rate_a, as compare_success computes it.

    Inputs have one entry per task on the last axis (leading axes: independent experiments, so a
    simulation computes thousands of intervals at once); returns (low, high) over the leading axes.
    For POPULATION the entries are the clusters (`compare_success` passes its `cluster`
    counts), for THESE_TASKS the strata. Fractional counts are refused (ValueError), not truncated.
    POPULATION: cluster-robust t interval (see the module docstring); the pooled difference's
    linearisation in task t is (k_bt - n_bt P_b) / N_b - (k_at - n_at P_a) / N_a, the same sandwich
    statsmodels' OLS of success on the arm with `cov_type="cluster"` gives, without its (N - 1) /
    (N - 2) run-count factor (tasks, not runs, are the units here). With a single task it is NaN:
    one task says nothing about others; when every task shows the same difference (variance 0) it
    is the THESE_TASKS interval, the least uncertainty tasks like these can have.
    THESE_TASKS: Newcombe's MOVER over each arm's Wilson interval at its effective number of runs
    N_eff = P (1 - P) / V, where V = sum_t k_t (n_t - k_t) / (n_t - 1) / N**2 is the unbiased
    variance of the pooled rate given the tasks' true rates.
    """
    if estimand not in ESTIMANDS:
        raise ValueError(f"unknown estimand {estimand!r}; use {' or '.join(map(repr, ESTIMANDS))}")
    ka = _whole_counts(successes_a, "successes_a").astype(float)
    na = _whole_counts(n_a, "n_a").astype(float)
    kb = _whole_counts(successes_b, "successes_b").astype(float)
    nb = _whole_counts(n_b, "n_b").astype(float)
    total_a, total_b = na.sum(axis=-1), nb.sum(axis=-1)
    rate_a, low_a, high_a = _these_tasks_bounds(ka, na)
    rate_b, low_b, high_b = _these_tasks_bounds(kb, nb)
    diff = rate_b - rate_a
    low = diff - np.sqrt((rate_b - low_b) ** 2 + (high_a - rate_a) ** 2)
    high = diff + np.sqrt((high_b - rate_b) ** 2 + (rate_a - low_a) ** 2)
    if estimand == THESE_TASKS:
        return low, high
    per_task = (kb - nb * rate_b[..., None]) / total_b[..., None]
    per_task -= (ka - na * rate_a[..., None]) / total_a[..., None]
    m = ka.shape[-1]
    variance = np.square(per_task).sum(axis=-1) * (m / (m - 1) if m > 1 else math.nan)
    half = _t_quantile(m) * np.sqrt(variance)
    # Every task showed the very same difference: the spread over tasks estimates as 0, but the
    # uncertainty over tasks cannot be less than that of these tasks' own runs.
    same = variance < 1e-24  # 0 up to the rounding of the per-task terms
    return np.where(same, low, np.clip(diff - half, -1, 1)), np.where(same, high, np.clip(diff + half, -1, 1))


def population_test(
    successes_a: np.ndarray, n_a: np.ndarray, successes_b: np.ndarray, n_b: np.ndarray
) -> np.ndarray:
    """Two-sided p of the POPULATION success difference: the Wald t-test of the pooled difference
    with `success_interval`'s task-clustered CR1 standard error and t(clusters - 1), so it rejects at
    5% exactly when that interval excludes 0. Counts per cluster on the last axis (leading axes:
    independent experiments). NaN with one cluster, or the same difference in every cluster (no
    spread: `compare_success` then decides with these tasks' exact test, as its interval is theirs).
    """
    ka, na, kb, nb = (
        _whole_counts(x, name).astype(float)
        for x, name in (
            (successes_a, "successes_a"),
            (n_a, "n_a"),
            (successes_b, "successes_b"),
            (n_b, "n_b"),
        )
    )
    return clustered_mean_difference(ka, na, kb, nb)[3]


def compare_success(
    df: pd.DataFrame,
    a: str,
    b: str,
    estimand: str | None = None,
    *,
    strata: str | Sequence[str] = DEFAULT_STRATA,
    cluster: str = DEFAULT_CLUSTER,
) -> Comparison:
    """Success rate of arm b minus arm a, pooled over the runs of the strata both arms ran.

    `success` must be binary (`binary_outcomes`): a fractional one is refused in one line (compare
    it with `compare_score`). `strata` (default ["task"]) are the columns the test conditions on,
    jointly; `cluster` (default "task") the column whose units the POPULATION interval treats
    as independent. To pool configurations of one task set, stratify by task and configuration and
    cluster by task: `strata=["task", "configuration"]`. Only strata run under both arms are used;
    the effect, the interval and the test all use the same runs.

    `estimand`: the question asked; default the experiment's (`df.attrs["estimand"]`, which
    `load_runs` sets), else POPULATION. Interval (`success_interval`): 95%; for POPULATION, the
    difference over tasks like these (a cluster-robust t interval with clusters - 1 degrees of
    freedom: NaN with one cluster), because a harness change is adopted for the tasks still to come,
    not for the five that were run; THESE_TASKS gives the narrower interval for exactly the strata
    run (run noise only). Both keep 95% coverage within Monte Carlo error from 5 to 50 tasks and 3
    to 10 repetitions (bench/coverage_intervals.py; tests/test_stats_calibration.py checks it).

    p-value: the test of the same estimand as the interval, so a decision answers one question.
    POPULATION: `population_test`, the Wald t-test with the interval's own standard error and
    quantile: p < 0.05 exactly when the interval excludes 0. THESE_TASKS: `stratified_test` (the
    exact conditional test stratified by `strata`; asymptotic CMH only for huge experiments), with
    Newcombe's interval; the two can differ a hair from the 5% boundary, where the note says so and
    the exact test decides. Per stratum, Fisher's exact test of that stratum alone (unadjusted) is
    reported in `per_task`. With no stratum run under both arms there is nothing to compare:
    effect, interval and p are NaN.
    """
    estimand = _estimand(df, estimand)
    _check_arms(df, a, b)
    strata_columns = _columns(strata, "strata")
    sub = df[df["condition"].isin([a, b]).to_numpy()]
    _check_columns(sub, strata_columns, "strata")
    _check_columns(sub, [cluster], "cluster")
    outcome = binary_outcomes(sub).astype(float)
    is_b = (sub["condition"] == b).to_numpy()
    stratum, labels = _codes(sub, strata_columns)
    ka, na, kb, nb = (np.rint(x).astype(np.int64) for x in _arm_sums(stratum, outcome, is_b, len(labels)))
    used = (na > 0) & (nb > 0)
    joint = " x ".join(strata_columns)

    def named(test: str) -> str:
        return test if strata_columns == ["task"] else test.replace("by task", f"by {joint}")

    if not used.any():
        what = "task" if strata_columns == ["task"] else f"stratum ({joint})"
        note = f"no {what} was run under both {a} and {b}"
        return _no_data("success", a, b, "difference", named(EXACT_TEST), note, estimand=estimand)
    ka, na, kb, nb = ka[used], na[used], kb[used], nb[used]
    labels = [label for label, keep in zip(labels, used, strict=True) if keep]
    runs = used[stratum]
    clusters, cluster_labels = _codes(sub[runs], [cluster])
    by_cluster = _arm_sums(clusters, outcome[runs], is_b[runs], len(cluster_labels))
    effect = float(kb.sum() / nb.sum() - ka.sum() / na.sum())
    note = None
    unit = _unit(cluster)
    if estimand == POPULATION:
        cluster_counts = [np.rint(x) for x in by_cluster]
        ci_low, ci_high = (float(x) for x in success_interval(*cluster_counts))
        p_value, test = float(population_test(*cluster_counts)), WALD_TEST
        if math.isnan(p_value) and len(cluster_labels) > 1:
            # The same difference in every task: no spread to test against, and the interval is
            # these tasks' (success_interval); so is the decision, to keep the two one question.
            p_value, test = stratified_test(ka, na, kb, nb)
            note = f"the same difference in every {unit}: interval and test are these {unit}s'"
    else:
        ci_low, ci_high = (float(x) for x in success_interval(ka, na, kb, nb, THESE_TASKS))
        p_value, test = stratified_test(ka, na, kb, nb)
        if not math.isnan(ci_low) and (p_value < 1 - CONFIDENCE) == (ci_low <= 0 <= ci_high):
            note = (
                "the exact test and Newcombe's interval disagree at the 5% boundary: "
                "the exact test is the decision"
            )
    per_task = []
    for label, sa, n_ta, sb, n_tb in zip(
        labels, ka.tolist(), na.tolist(), kb.tolist(), nb.tolist(), strict=True
    ):
        fisher_p = float(sps.fisher_exact([[sb, n_tb - sb], [sa, n_ta - sa]]).pvalue)
        per_task.append(
            {"task": label, "successes_a": sa, "n_a": n_ta}
            | {"successes_b": sb, "n_b": n_tb, "fisher_p": fisher_p}
        )
    m = ka + kb
    informative = (m > 0) & (m < na + nb)
    if not informative.any():
        p_value = 1.0
        note = "every task's outcome was the same in all runs of both arms: no information, p = 1"
    elif len(cluster_labels) == 1 and estimand == POPULATION:
        note = f"a single {unit}: no interval or test over {unit}s"
    return Comparison(
        metric="success",
        a=a,
        b=b,
        effect_kind="difference",
        effect=effect,
        ci_low=ci_low,
        ci_high=ci_high,
        p_value=p_value,
        test=named(test),
        n_tasks=len(cluster_labels),
        n_a=int(na.sum()),
        n_b=int(nb.sum()),
        per_task=per_task,
        note=note,
        estimand=estimand,
    )


def wilcoxon_min_p(n_tasks: int) -> float:
    """Smallest two-sided p-value the Wilcoxon signed-rank test can give with n_tasks pairs.

    Up to 50 pairs scipy computes the exact (or, with ties, the full permutation) null law, whose
    most extreme outcome (every difference of one sign) has probability 2 / 2**n: 0.0625 for 5
    tasks, so 5 tasks can never reach p < 0.05. Above 50 pairs it uses the normal approximation,
    which has no useful floor (returned as 0).
    """
    if n_tasks < 1:
        return 1.0
    return min(1.0, 2.0 ** (1 - n_tasks)) if n_tasks <= 50 else 0.0


def _tied(d: np.ndarray) -> np.ndarray:
    magnitudes = np.sort(np.abs(d), axis=1)
    return (magnitudes[:, 0] == 0) | (np.diff(magnitudes, axis=1) == 0).any(axis=1)


def paired_median_test(differences: np.ndarray) -> np.ndarray:
    """Two-sided Wilcoxon signed-rank p-values, one per row of per-task differences of medians.

    `differences` has shape (n_tasks,) or (rows, n_tasks). scipy.stats.wilcoxon with its defaults
    (zero differences dropped; exact null law without ties, full permutation with ties up to 13
    pairs, normal approximation beyond). A row with fewer than 2 tasks or only zero differences
    gets p = 1. Rows with ties or zeros are tested one by one, so that every row gets exactly the
    p-value it would get alone (scipy picks the method for a whole batch). This is the one metric
    test of the rig: compare_metric and power_cost both call it.
    """
    d = np.atleast_2d(np.asarray(differences, dtype=float))
    p = np.ones(d.shape[0])
    if d.shape[1] < 2:
        return p
    testable = (d != 0).any(axis=1)
    tied = _tied(d)
    with warnings.catch_warnings():
        # scipy warns about ties/zeros switching methods; that choice is documented above.
        warnings.simplefilter("ignore", RuntimeWarning)
        warnings.simplefilter("ignore", UserWarning)
        clean = testable & ~tied
        if clean.any():
            p[clean] = sps.wilcoxon(d[clean], axis=1).pvalue
        for i in np.flatnonzero(testable & tied):
            p[i] = float(sps.wilcoxon(d[i]).pvalue)
    return np.where(np.isnan(p), 1.0, p)


def _pooled_median(values: list[np.ndarray], skip: int | None) -> float:
    return float(np.median(np.concatenate([v for t, v in enumerate(values) if t != skip])))


def median_ratio_interval(values_a: list[np.ndarray], values_b: list[np.ndarray]) -> tuple[float, float]:
    """95% interval of median(all b runs) / median(all a runs) over tasks like these.

    One array of run values per task, in the same task order for both arms. The log ratio is
    recomputed leaving out one task at a time (both arms together, so the pairing by task is kept);
    the delete-a-task jackknife variance (m - 1) / m * sum (theta_(t) - mean)^2, the CR3
    cluster-robust variance that holds up with few clusters, gives a t interval with m - 1 degrees
    of freedom on the log scale, exponentiated back to a ratio. NaN with fewer than 2 tasks or a
    median (of all tasks or of all but one) of 0.
    """
    m = len(values_a)
    if m < 2:
        return (math.nan, math.nan)
    medians = np.array(
        [[_pooled_median(values_a, t), _pooled_median(values_b, t)] for t in [None, *range(m)]]
    )
    if (medians <= 0).any():
        return (math.nan, math.nan)
    log_ratios = np.log(medians[:, 1] / medians[:, 0])
    left_out = log_ratios[1:]
    half = _t_quantile(m) * math.sqrt((m - 1) / m * np.square(left_out - left_out.mean()).sum())
    return (math.exp(log_ratios[0] - half), math.exp(log_ratios[0] + half))


def compare_metric(
    df: pd.DataFrame, metric: str, a: str, b: str, *, cluster: str = DEFAULT_CLUSTER
) -> Comparison:
    """Ratio of the median of `metric` under arm b to that under arm a (pooled over runs).

    Runs whose value is missing (NaN, e.g. a harness that reports no cost) are dropped, as are,
    for cost and tokens, runs whose metrics are incomplete (`usage_values`); only clusters (tasks,
    unless `cluster` names another column) with values in both arms are used. Interval:
    `median_ratio_interval`, 95% over tasks like these (POPULATION; with the same ratio in
    every task the ratio for these tasks is the same number); NaN with one task. p-value: Wilcoxon
    signed-rank test on the per-task paired medians (median_b - median_a per task;
    `paired_median_test`): a test over tasks, so with few tasks it is weak and with 5 or fewer it
    can never reach 0.05 (the note says so). With fewer than 2 tasks or no difference at all,
    p = 1.0 and the note says why. If an arm has no value at all, or no task has values in both,
    there is nothing to compare: effect, interval and p are NaN (and stay out of Holm's family).
    """
    _check_arms(df, a, b)
    if metric not in df.columns:
        raise ValueError(f"unknown metric {metric!r}; the columns are {', '.join(map(str, df.columns))}")
    rows = df[df["condition"].isin([a, b]).to_numpy()]
    _check_columns(rows, [cluster], "cluster")
    sub = pd.DataFrame(
        {
            "task": rows[cluster].to_numpy(),
            "condition": rows["condition"].to_numpy(),
            "value": usage_values(rows, metric).to_numpy(),
        }
    )
    label = "cost" if metric == "cost_usd" else metric
    incomplete = int((_incomplete(rows) & rows[metric].notna()).sum()) if metric in USAGE_METRICS else 0
    notes = []
    dropped = int(sub["value"].isna().sum()) - incomplete
    sub = sub[sub["value"].notna()]
    if incomplete:
        notes.append(f"{incomplete} runs with incomplete metrics dropped")
    missing = [arm for arm in (a, b) if not (sub["condition"] == arm).any()]
    if missing:
        return _no_data(
            metric, a, b, "ratio", WILCOXON_TEST,
            "; ".join([f"no {label} reported for {' and '.join(missing)}", *notes]),
            n_a=int((sub["condition"] == a).sum()), n_b=int((sub["condition"] == b).sum()),
        )  # fmt: skip
    if dropped:
        notes.append(f"{dropped} runs without {label} dropped")
    by_cell = {key: g["value"].to_numpy() for key, g in sub.groupby(["task", "condition"], sort=False)}
    tasks = [t for t in sub["task"].unique() if (t, a) in by_cell and (t, b) in by_cell]
    if not tasks:
        notes.append(f"no {_unit(cluster)} has {label} in both {a} and {b}")
        return _no_data(metric, a, b, "ratio", WILCOXON_TEST, "; ".join(notes))
    values_a = [by_cell[(t, a)] for t in tasks]
    values_b = [by_cell[(t, b)] for t in tasks]
    median_a = float(np.median(np.concatenate(values_a)))
    median_b = float(np.median(np.concatenate(values_b)))
    if median_a == 0:
        effect, ci_low, ci_high = math.nan, math.nan, math.nan
        notes.append(f"median {label} of {a} is 0: the ratio is undefined")
    else:
        effect = median_b / median_a
        ci_low, ci_high = median_ratio_interval(values_a, values_b)
        if median_b == 0:
            notes.append(f"median {label} of {b} is 0: no interval for the ratio")
    task_a = np.array([np.median(v) for v in values_a])
    task_b = np.array([np.median(v) for v in values_b])
    differences = task_b - task_a
    p_value = float(paired_median_test(differences)[0])
    if len(tasks) < 2:
        notes.append("fewer than 2 tasks in both arms: no Wilcoxon test, p = 1, no interval over tasks")
    elif not differences.any():
        notes.append("per-task medians are equal in every task: p = 1")
    elif wilcoxon_min_p(differing := int(np.count_nonzero(differences))) >= 0.05:
        notes.append(f"with {differing} tasks that differ the Wilcoxon test cannot reach p < 0.05")
    per_task = [
        {"task": t, "median_a": float(ma), "median_b": float(mb), "n_a": len(va), "n_b": len(vb)}
        for t, ma, mb, va, vb in zip(tasks, task_a, task_b, values_a, values_b, strict=True)
    ]
    return Comparison(
        metric=metric,
        a=a,
        b=b,
        effect_kind="ratio",
        effect=effect,
        ci_low=ci_low,
        ci_high=ci_high,
        p_value=p_value,
        test=WILCOXON_TEST,
        n_tasks=len(tasks),
        n_a=sum(len(v) for v in values_a),
        n_b=sum(len(v) for v in values_b),
        per_task=per_task,
        note="; ".join(notes) or None,
    )


# -- fractional outcomes (score) -------------------------------------------------------------


def clustered_mean_difference(
    sums_a: np.ndarray, n_a: np.ndarray, sums_b: np.ndarray, n_b: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pooled mean difference M_b - M_a, its 95% CR1 interval over clusters and the Wald t-test.

    Inputs have one entry per cluster (task) on the last axis: the sum of the arm's run values and
    its number of runs (leading axes: independent experiments, as in `success_interval`). The
    difference's linearisation in cluster t is (s_bt - n_bt M_b) / N_b - (s_at - n_at M_a) / N_a;
    its CR1 variance V = m / (m - 1) * sum of squares over the m clusters; the interval is
    diff -/+ t(0.975, m - 1) sqrt(V), clipped to [-1, 1], and the p-value 2 P(T_(m-1) > |diff| /
    sqrt(V)): the same estimand, standard error and quantile, so the interval excludes 0 exactly
    when p < 0.05. For 0/1 values it is `success_interval`'s POPULATION interval. Returns
    (diff, low, high, p); interval and p are NaN with one cluster, and where V is 0 (the same
    difference in every cluster: no spread to estimate the uncertainty from).
    """
    sa, na = np.asarray(sums_a, dtype=float), np.asarray(n_a, dtype=float)
    sb, nb = np.asarray(sums_b, dtype=float), np.asarray(n_b, dtype=float)
    total_a, total_b = na.sum(axis=-1), nb.sum(axis=-1)
    mean_a, mean_b = sa.sum(axis=-1) / total_a, sb.sum(axis=-1) / total_b
    diff = mean_b - mean_a
    per_cluster = (sb - nb * mean_b[..., None]) / total_b[..., None]
    per_cluster -= (sa - na * mean_a[..., None]) / total_a[..., None]
    m = sa.shape[-1]
    variance = np.square(per_cluster).sum(axis=-1) * (m / (m - 1) if m > 1 else math.nan)
    # 0 up to the rounding of the per-cluster terms: no spread, no interval and no test.
    se = np.where(variance > 1e-24, np.sqrt(np.where(variance > 0, variance, 1.0)), math.nan)
    half = _t_quantile(m) * se
    with np.errstate(invalid="ignore"):
        p = 2 * sps.t.sf(np.abs(diff) / se, m - 1) if m > 1 else np.full_like(diff, math.nan)
    return diff, np.clip(diff - half, -1, 1), np.clip(diff + half, -1, 1), p


def _score_values(df: pd.DataFrame, column: str = SCORE) -> np.ndarray:
    """The fractional outcomes of `column` (NaN where missing), or a one-line ValueError."""
    try:
        values = df[column].to_numpy(dtype=float, na_value=np.nan)
    except (TypeError, ValueError):
        raise ValueError(
            f"column {column!r} holds non-numeric values; a score is a number in [0, 1] per run"
        ) from None
    outside = (values < 0) | (values > 1)
    if outside.any():
        raise ValueError(
            f"column {column!r} holds values outside [0, 1] (e.g. {float(values[outside][0]):g}); "
            "a score is the share of the credit a run earned"
        )
    return values


def these_tasks_mean_difference(
    values: np.ndarray, codes: np.ndarray, is_b: np.ndarray, groups: int
) -> tuple[float, float, float, float]:
    """Pooled mean difference M_b - M_a of exactly the tasks run, its 95% interval and z-test p.

    Only run-to-run noise is uncertain: Var(M) = sum_t n_t s_t^2 / N^2 per arm, with s_t^2 the
    unbiased variance of the task's runs in that arm (a task with one run in an arm gives no
    estimate and adds 0); interval diff -/+ z(0.975) sqrt(Var_a + Var_b), p = 2 P(Z > |diff| / se):
    one standard error, so the interval excludes 0 exactly when p < 0.05. NaN interval and p when
    every run agreed within its task and arm (se 0).
    """
    total = []
    for arm in (~is_b, is_b):
        n = np.bincount(codes, weights=arm, minlength=groups)
        s1 = np.bincount(codes, weights=values * arm, minlength=groups)
        s2 = np.bincount(codes, weights=values * values * arm, minlength=groups)
        safe_n = np.where(n > 0, n, 1)
        var = np.where(n > 1, (s2 - s1 * s1 / safe_n) / np.where(n > 1, n - 1, 1), 0.0)
        total.append((s1.sum() / n.sum(), float((n * np.clip(var, 0, None)).sum() / n.sum() ** 2)))
    (mean_a, var_a), (mean_b, var_b) = total
    diff, se = float(mean_b - mean_a), math.sqrt(var_a + var_b)
    if se <= 1e-12:
        return diff, math.nan, math.nan, math.nan
    half = float(sps.norm.ppf(1 - (1 - CONFIDENCE) / 2)) * se
    p = float(2 * sps.norm.sf(abs(diff) / se))
    return diff, max(diff - half, -1.0), min(diff + half, 1.0), p


def compare_score(
    df: pd.DataFrame,
    a: str,
    b: str,
    estimand: str | None = None,
    *,
    column: str = SCORE,
    cluster: str = DEFAULT_CLUSTER,
) -> Comparison:
    """Mean score of arm b minus arm a: a fractional outcome in [0, 1] per run (partial credit).

    Paired by task: only clusters (tasks, unless `cluster` names another column) with scores in
    both arms are used; runs without a score (NaN) are dropped and counted in the note; a value
    outside [0, 1] is refused. The effect is the pooled mean difference (other - reference), its
    95% interval the task-clustered CR1 t interval (clusters - 1 degrees of freedom) the success
    difference uses for POPULATION, and its p-value the Wald t-test of the same estimand with
    the same standard error (`clustered_mean_difference`), so the two never disagree. With one task,
    or the very same difference in every task, interval and p are NaN (the note says why); with no
    score in an arm, or no task scored in both, effect, interval and p are NaN.
    THESE_TASKS: the same effect for exactly the tasks run, with run-to-run noise only
    (`these_tasks_mean_difference`: a z-test and the interval of its own standard error).
    """
    estimand = _estimand(df, estimand)
    _check_arms(df, a, b)
    if column not in df.columns:
        raise ValueError(f"no column {column!r}: a score comparison needs a value in [0, 1] per run")
    rows = df[df["condition"].isin([a, b]).to_numpy()]
    _check_columns(rows, [cluster], "cluster")
    values = _score_values(rows, column)
    is_b = (rows["condition"] == b).to_numpy()
    present = ~np.isnan(values)
    unit = _unit(cluster)
    notes = []
    missing = [arm for arm, mine in ((a, ~is_b), (b, is_b)) if not (present & mine).any()]
    if missing:
        note = f"no {column} for {' and '.join(missing)}"
        counts = {"n_a": int((present & ~is_b).sum()), "n_b": int((present & is_b).sum())}
        return _no_data(SCORE, a, b, "difference", WALD_TEST, note, **counts)
    if dropped := int((~present).sum()):
        notes.append(f"{dropped} runs without {column} dropped")
    codes, labels = _codes(rows, [cluster])
    _, n_a, _, n_b = _arm_sums(codes[present], values[present], is_b[present], len(labels))
    used = (n_a > 0) & (n_b > 0)
    if not used.any():
        notes.append(f"no {unit} has {column} in both {a} and {b}")
        return _no_data(SCORE, a, b, "difference", WALD_TEST, "; ".join(notes))
    runs = present & used[codes]
    sums_a, n_a, sums_b, n_b = (
        x[used] for x in _arm_sums(codes[runs], values[runs], is_b[runs], len(labels))
    )
    if estimand == THESE_TASKS:
        diff, low, high, p = these_tasks_mean_difference(values[runs], codes[runs], is_b[runs], len(labels))
        test = THESE_TASKS_Z_TEST
        if math.isnan(p):
            notes.append("every run agreed within its task and arm: no run-to-run noise, no test")
    else:
        diff, low, high, p = (float(x) for x in clustered_mean_difference(sums_a, n_a, sums_b, n_b))
        test = WALD_TEST
        if used.sum() == 1:
            notes.append(f"a single {unit}: no interval or test over {unit}s")
        elif math.isnan(p):
            notes.append(
                f"the same difference in every {unit}: "
                f"no spread over {unit}s to estimate its uncertainty, no test"
            )
    labels = [label for label, keep in zip(labels, used, strict=True) if keep]
    per_task = [
        {"task": label, "mean_a": sa / na, "n_a": int(na), "mean_b": sb / nb, "n_b": int(nb)}
        for label, sa, na, sb, nb in zip(labels, sums_a, n_a, sums_b, n_b, strict=True)
    ]
    return Comparison(
        metric=SCORE,
        a=a,
        b=b,
        effect_kind="difference",
        effect=diff,
        ci_low=low,
        ci_high=high,
        p_value=p,
        test=test,
        n_tasks=len(labels),
        n_a=int(n_a.sum()),
        n_b=int(n_b.sum()),
        per_task=per_task,
        note="; ".join(notes) or None,
        estimand=estimand,
    )


# -- all comparisons of a report -------------------------------------------------------------


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (statsmodels' `multipletests`), in the input order.

    Rejecting where adjusted p < alpha keeps the chance of any false positive among all
    comparisons at most alpha, under any dependence between them. NaN stays NaN and does not
    count in m.
    """
    from statsmodels.stats.multitest import multipletests

    p = np.asarray(list(pvalues), dtype=float)
    adjusted = np.full(len(p), np.nan)
    valid = ~np.isnan(p)
    if valid.any():
        adjusted[valid] = multipletests(p[valid], method="holm")[1]
    return [float(x) for x in adjusted]


def arm_order(
    df: pd.DataFrame, reference: str | None = None, conditions: Sequence[str] | None = None
) -> list[str]:
    """The arms of `df` to compare, the reference first; never the order the rows come in.

    The order is `conditions` if given (every name must be in the data; the data's other
    conditions are not compared), else the declared order `load_runs` records in
    `df.attrs["conditions"]` (or a categorical `condition` column's categories), the data's other
    conditions after it by name. An explicit `reference` (which must be among them) goes first.
    With no reference, no `conditions` and no declared order, the reference is unknown and
    ValueError says how to name it. With one arm, that arm alone.
    """
    present = list(df["condition"].unique())
    if conditions is not None:
        order = list(dict.fromkeys(conditions))
        unknown = [c for c in order if c not in present]
        if unknown:
            raise ValueError(
                f"conditions {', '.join(map(repr, unknown))} are not in the data; "
                f"conditions: {', '.join(map(str, present))}"
            )
    else:
        declared = df.attrs.get("conditions")
        if declared is None and isinstance(df["condition"].dtype, pd.CategoricalDtype):
            declared = list(df["condition"].cat.categories)
        known = [c for c in dict.fromkeys(declared or []) if c in present]
        order = known + sorted((c for c in present if c not in known), key=str)
        if reference is None and not known and len(present) > 1:
            raise ValueError(
                "name the reference arm: compare_conditions(df, reference=...) or conditions=[...] in the "
                "experiment's order (load_runs records it); the order of the rows is never used"
            )
    if reference is not None:
        if reference not in order:
            raise ValueError(
                f"reference {reference!r} is not a condition; conditions: {', '.join(map(str, order))}"
            )
        order = [reference, *(c for c in order if c != reference)]
    return order


def compare_conditions(
    df: pd.DataFrame,
    reference: str | None = None,
    metrics: Sequence[str] | None = None,
    *,
    conditions: Sequence[str] | None = None,
    strata: str | Sequence[str] = DEFAULT_STRATA,
    cluster: str = DEFAULT_CLUSTER,
    estimand: str | None = None,
) -> list[Comparison]:
    """Every condition against the reference on every metric, with Holm-adjusted p-values.

    The reference is named (`arm_order`): `reference` if given, else the first of `conditions`,
    else the first condition the experiment declares (`load_runs` records the declared order in
    `df.attrs`); never whichever condition the rows happen to list first, so reordering the rows
    changes no effect's sign. The others follow in that order. `metrics` defaults to METRICS with
    "score" after "success" when `df` has a score column. "success" goes through compare_success
    (with `strata` and `cluster`), "score" through compare_score, any other metric (a numeric
    column) through compare_metric (clustered by `cluster`); only tasks run in both arms count. A
    metric with no data (its column absent, or no values in an arm) gives a comparison with NaN
    effect, interval and p-value and a note. p_adjusted is Holm's adjustment across the
    comparisons that have a p-value, so a report of many comparisons still controls the chance of
    any false positive and an absent metric does not dilute the others; the others get NaN.
    `estimand` (POPULATION or THESE_TASKS; default: the one the experiment declares, which
    `load_runs` records in `df.attrs["estimand"]`, else POPULATION) is the question success and
    score answer: each gets the interval and the test of that one estimand; the ratio metrics are
    always over tasks like these.
    """
    estimand = _estimand(df, estimand)
    arms = arm_order(df, reference, conditions)
    if metrics is None:
        scored = SCORE in df.columns and bool(df[SCORE].notna().any())
        metrics = (METRICS[0], SCORE, *METRICS[1:]) if scored else METRICS
    comparisons = []
    for other in arms[1:]:
        for metric in metrics:
            comparisons.append(_compare(df, metric, arms[0], other, strata, cluster, estimand))
    for comparison, adjusted in zip(comparisons, holm([c.p_value for c in comparisons]), strict=True):
        comparison.p_adjusted = adjusted
    return comparisons


def _compare(
    df: pd.DataFrame,
    metric: str,
    a: str,
    b: str,
    strata: str | Sequence[str],
    cluster: str,
    estimand: str,
) -> Comparison:
    kind = "difference" if metric in ("success", SCORE) else "ratio"
    tests = {"success": EXACT_TEST, SCORE: THESE_TASKS_Z_TEST}
    if estimand == POPULATION:
        tests = {"success": WALD_TEST, SCORE: WALD_TEST}
    test = tests.get(metric, WILCOXON_TEST)
    if metric not in df.columns:
        return _no_data(metric, a, b, kind, test, f"no {metric} column in the data", estimand=estimand)
    if metric == "success":
        return compare_success(df, a, b, estimand, strata=strata, cluster=cluster)
    if metric == SCORE:
        return compare_score(df, a, b, estimand, cluster=cluster)
    return compare_metric(df, metric, a, b, cluster=cluster)
