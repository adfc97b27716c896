"""The statistics a report states: per-cell rates with intervals, and arm-vs-arm comparisons.

The design being analysed: a few tasks (strata), each run several times under each condition
(arm). Tasks differ a lot in difficulty, so every comparison is paired by task: only tasks present
in both arms are used, the success test is stratified by task, the metric test works on per-task
medians, and every bootstrap resamples tasks (the unit we want to generalise over) as well as runs.

Conventions: arm `a` is the reference, `b` the arm compared with it; a success effect is the
difference of rates b - a, a metric effect the ratio of medians b / a; intervals are 95% (CONFIDENCE).

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

- TASKS_AS_SAMPLED (the default, and what reports show): the effect over the population of tasks
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from rig.schema import ModelUsage

CONFIDENCE = 0.95
METRICS: tuple[str, ...] = ("success", "cost_usd", "total_tokens", "tool_calls", "wall_s")
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
# Probabilities within this relative tolerance of the observed one count as "as likely": the
# floating-point guard of Fisher's exact test in R and scipy, so one stratum gives the same p.
_REL_TOL = 1 + 1e-7
TASKS_AS_SAMPLED = "tasks as sampled"
THESE_TASKS = "these tasks"
ESTIMANDS: tuple[str, ...] = (TASKS_AS_SAMPLED, THESE_TASKS)

CELL_COLUMNS: tuple[str, ...] = (
    "task",
    "condition",
    "n",
    "successes",
    "success_rate",
    "ci_low",
    "ci_high",
    "median_cost_usd",
    "median_total_tokens",
    "median_tool_calls",
    "median_wall_s",
    "incomplete_metrics",
)


@dataclass
class Comparison:
    """Arm b against reference arm a on one metric, pooled over the tasks both arms ran.

    `effect` is rate_b - rate_a for success (`effect_kind` "difference") and median_b / median_a
    for the other metrics ("ratio"); [`ci_low`, `ci_high`] is its 95% interval for `estimand`
    (TASKS_AS_SAMPLED or THESE_TASKS, see the module docstring); `p_value` comes from `test`;
    `p_adjusted` is the Holm-adjusted p-value across all comparisons of one report (set by
    `compare_conditions`). `n_tasks` counts the tasks used, `n_a`
    and `n_b` the runs. `per_task` holds, for success, {task, successes_a, n_a, successes_b, n_b,
    fisher_p} (Fisher's exact two-sided p of that task alone, unadjusted) and for metrics {task,
    median_a, median_b, n_a, n_b}. `note` explains anything unusual (missing values, no test).
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
    estimand: str = TASKS_AS_SAMPLED


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


def _median(values: pd.Series) -> float:
    values = pd.to_numeric(values, errors="coerce").dropna()
    return float(values.median()) if len(values) else math.nan


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


def cell_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per (task, condition) cell, then per condition over all tasks (task "ALL").

    n runs, successes, success_rate = successes / n with its 95% Wilson interval
    (ci_low, ci_high), and medians of cost (NaN runs without a cost ignored), total tokens, tool
    calls and wall time; cost and tokens leave out the `incomplete_metrics` runs (see
    `usage_values`), which still count in n and successes. Rows follow the order tasks and
    conditions first appear in `df`.
    """
    tasks = list(df["task"].unique())
    conditions = list(df["condition"].unique())
    groups = dict(iter(df.groupby(["task", "condition"], sort=False)))
    rows = []

    def row(task: str, condition: str, cell: pd.DataFrame) -> dict[str, Any]:
        n = len(cell)
        k = int(cell["success"].sum())
        low, high = wilson_interval(k, n)
        return {
            "task": task,
            "condition": condition,
            "n": n,
            "successes": k,
            "success_rate": k / n,
            "ci_low": low,
            "ci_high": high,
            "median_cost_usd": _median(usage_values(cell, "cost_usd")),
            "median_total_tokens": _median(usage_values(cell, "total_tokens")),
            "median_tool_calls": _median(cell["tool_calls"]),
            "median_wall_s": _median(cell["wall_s"]),
            "incomplete_metrics": int(_incomplete(cell).sum()),
        }

    for task in tasks:
        for condition in conditions:
            cell = groups.get((task, condition))
            if cell is not None and len(cell):
                rows.append(row(task, condition, cell))
    for condition in conditions:
        rows.append(row("ALL", condition, df[df["condition"] == condition]))
    return pd.DataFrame(rows, columns=list(CELL_COLUMNS))


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
    """Two-sided p-value of "no difference in success between the arms", stratified by task.

    One entry per task in each sequence. The exact conditional test (exact CMH) runs unless its
    support exceeds EXACT_MAX_SUPPORT points, then the asymptotic CMH test (see the module
    docstring); `method` "exact" or "cmh" forces one. Tasks with a constant outcome, or missing
    an arm, are uninformative and dropped; with none left the p-value is 1.0. Returns (p, test name).
    This is the one success test of the rig: compare_success and power_success both call it.
    """
    ka, na = np.asarray(successes_a, dtype=np.int64), np.asarray(n_a, dtype=np.int64)
    kb, nb = np.asarray(successes_b, dtype=np.int64), np.asarray(n_b, dtype=np.int64)
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


def _success_counts(df: pd.DataFrame, a: str, b: str) -> pd.DataFrame:
    """Per task run by both arms (order of appearance): successes_a, n_a, successes_b, n_b."""
    sub = df[df["condition"].isin([a, b])]
    counts = sub.groupby(["task", "condition"], sort=False)["success"].agg(["sum", "count"])
    rows = []
    for task in sub["task"].unique():
        if (task, a) in counts.index and (task, b) in counts.index:
            ca, cb = counts.loc[(task, a)], counts.loc[(task, b)]
            rows.append((task, int(ca["sum"]), int(ca["count"]), int(cb["sum"]), int(cb["count"])))
    return pd.DataFrame(rows, columns=["task", "successes_a", "n_a", "successes_b", "n_b"])


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
    return np.where(infinite, rate, low), np.where(infinite, rate, high)


def success_interval(
    successes_a: np.ndarray,
    n_a: np.ndarray,
    successes_b: np.ndarray,
    n_b: np.ndarray,
    estimand: str = TASKS_AS_SAMPLED,
) -> tuple[np.ndarray, np.ndarray]:
    """95% interval of the pooled difference rate_b - rate_a, as compare_success computes it.

    Inputs have one entry per task on the last axis (leading axes: independent experiments, so a
    simulation computes thousands of intervals at once); returns (low, high) over the leading axes.
    TASKS_AS_SAMPLED: cluster-robust t interval (see the module docstring); the pooled difference's
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
    ka, na = np.asarray(successes_a, dtype=float), np.asarray(n_a, dtype=float)
    kb, nb = np.asarray(successes_b, dtype=float), np.asarray(n_b, dtype=float)
    total_a, total_b = na.sum(axis=-1), nb.sum(axis=-1)
    rate_a, rate_b = ka.sum(axis=-1) / total_a, kb.sum(axis=-1) / total_b
    diff = rate_b - rate_a
    bounds = []
    for k, n, total, rate in ((ka, na, total_a, rate_a), (kb, nb, total_b, rate_b)):
        # A task run once has no within-task variance estimate; it adds 0 (0 / 1).
        variance = (k * (n - k) / np.maximum(n - 1, 1)).sum(axis=-1) / total**2
        with np.errstate(divide="ignore", invalid="ignore"):
            n_eff = np.where(variance > 0, rate * (1 - rate) / variance, np.inf)
        # All runs failed or all passed: no spread to estimate, so the runs count as independent.
        n_eff = np.where((rate == 0) | (rate == 1), total, n_eff)
        bounds.append(_wilson_bounds(rate, n_eff))
    (low_a, high_a), (low_b, high_b) = bounds
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


def compare_success(df: pd.DataFrame, a: str, b: str, estimand: str = TASKS_AS_SAMPLED) -> Comparison:
    """Success rate of arm b minus arm a, pooled over the runs of the tasks both arms ran.

    Interval (`success_interval`): 95%, by default for TASKS_AS_SAMPLED, the difference over tasks
    like these (a cluster-robust t interval with tasks - 1 degrees of freedom: NaN with one task),
    because a harness change is adopted for the tasks still to come, not for the five that were
    run; THESE_TASKS gives the narrower interval for exactly the tasks run (run noise only).
    Both keep 95% coverage within Monte Carlo error from 5 to 50 tasks and 3 to 10 repetitions
    (bench/coverage_intervals.py; tests/test_stats_calibration.py checks it).

    p-value: `stratified_test` (exact conditional test stratified by task; asymptotic CMH only for
    huge experiments). Per task, Fisher's exact test of that task alone (unadjusted) is reported in
    `per_task`. The interval and the test can disagree near the boundary: the test is the decision.
    """
    _check_arms(df, a, b)
    counts = _success_counts(df, a, b)
    ka, na = counts["successes_a"].to_numpy(), counts["n_a"].to_numpy()
    kb, nb = counts["successes_b"].to_numpy(), counts["n_b"].to_numpy()
    if not len(counts):
        return Comparison(
            "success", a, b, "difference", math.nan, math.nan, math.nan, 1.0, EXACT_TEST,
            note=f"no task was run under both {a} and {b}", estimand=estimand,
        )  # fmt: skip
    effect = float(kb.sum() / nb.sum() - ka.sum() / na.sum())
    ci_low, ci_high = (float(x) for x in success_interval(ka, na, kb, nb, estimand))
    p_value, test = stratified_test(ka, na, kb, nb)
    per_task = []
    for task, sa, n_ta, sb, n_tb in counts.itertuples(index=False):
        fisher_p = float(sps.fisher_exact([[sb, n_tb - sb], [sa, n_ta - sa]]).pvalue)
        per_task.append(
            {"task": task, "successes_a": sa, "n_a": n_ta}
            | {"successes_b": sb, "n_b": n_tb, "fisher_p": fisher_p}
        )
    m = ka + kb
    informative = (m > 0) & (m < na + nb)
    note = None
    if not informative.any():
        note = "every task's outcome was the same in all runs of both arms: no information, p = 1"
    elif len(counts) == 1 and estimand == TASKS_AS_SAMPLED:
        note = "a single task: no interval over tasks"
    return Comparison(
        metric="success",
        a=a,
        b=b,
        effect_kind="difference",
        effect=effect,
        ci_low=ci_low,
        ci_high=ci_high,
        p_value=p_value,
        test=test,
        n_tasks=len(counts),
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


def compare_metric(df: pd.DataFrame, metric: str, a: str, b: str) -> Comparison:
    """Ratio of the median of `metric` under arm b to that under arm a (pooled over runs).

    Runs whose value is missing (NaN, e.g. a harness that reports no cost) are dropped, as are,
    for cost and tokens, runs whose metrics are incomplete (`usage_values`); only tasks with values
    in both arms are used. Interval: `median_ratio_interval`, 95% over tasks
    like these (TASKS_AS_SAMPLED; with the same ratio in every task the ratio for these tasks is
    the same number); NaN with one task. p-value: Wilcoxon signed-rank test on the per-task paired
    medians (median_b - median_a per task; `paired_median_test`): a test over tasks, so with few
    tasks it is weak and with 5 or fewer it can never reach 0.05 (the note says so). With fewer
    than 2 tasks or no difference at all, p = 1.0 and the note says why. If an arm has no value at
    all, effect and interval are NaN and p = 1.0.
    """
    _check_arms(df, a, b)
    if metric not in df.columns:
        raise ValueError(f"unknown metric {metric!r}; the columns are {', '.join(map(str, df.columns))}")
    sub = df.loc[df["condition"].isin([a, b]), ["task", "condition"]].copy()
    label = "cost" if metric == "cost_usd" else metric
    rows = df.loc[sub.index]
    incomplete = int((_incomplete(rows) & rows[metric].notna()).sum()) if metric in USAGE_METRICS else 0
    sub["value"] = usage_values(rows, metric)
    notes = []
    dropped = int(sub["value"].isna().sum()) - incomplete
    sub = sub[sub["value"].notna()]
    if incomplete:
        notes.append(f"{incomplete} runs with incomplete metrics dropped")
    missing = [arm for arm in (a, b) if not (sub["condition"] == arm).any()]
    if missing:
        return Comparison(
            metric, a, b, "ratio", math.nan, math.nan, math.nan, 1.0, WILCOXON_TEST,
            n_a=int((sub["condition"] == a).sum()), n_b=int((sub["condition"] == b).sum()),
            note="; ".join([f"no {label} reported for {' and '.join(missing)}", *notes]),
        )  # fmt: skip
    if dropped:
        notes.append(f"{dropped} runs without {label} dropped")
    by_cell = {key: g["value"].to_numpy() for key, g in sub.groupby(["task", "condition"], sort=False)}
    tasks = [t for t in sub["task"].unique() if (t, a) in by_cell and (t, b) in by_cell]
    if not tasks:
        notes.append(f"no task has {label} in both {a} and {b}")
        return Comparison(
            metric, a, b, "ratio", math.nan, math.nan, math.nan, 1.0, WILCOXON_TEST, note="; ".join(notes)
        )
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


def compare_conditions(
    df: pd.DataFrame,
    reference: str | None = None,
    metrics: Sequence[str] = METRICS,
) -> list[Comparison]:
    """Every condition against the reference on every metric, with Holm-adjusted p-values.

    The reference defaults to the first condition in order of appearance (load_runs orders rows
    by the conditions' declared order, so that is the first declared arm). "success" goes through
    compare_success, any other metric (a numeric column) through compare_metric; only tasks run in
    both arms count. p_adjusted is Holm's adjustment across all the comparisons returned, so a
    report of many comparisons still controls the chance of any false positive.
    """
    conditions = list(df["condition"].unique())
    if reference is None:
        reference = conditions[0]
    elif reference not in conditions:
        raise ValueError(f"reference {reference!r} is not a condition; conditions: {', '.join(conditions)}")
    comparisons = []
    for other in conditions:
        if other == reference:
            continue
        for metric in metrics:
            if metric == "success":
                comparisons.append(compare_success(df, reference, other))
            else:
                comparisons.append(compare_metric(df, metric, reference, other))
    for comparison, adjusted in zip(comparisons, holm([c.p_value for c in comparisons]), strict=True):
        comparison.p_adjusted = adjusted
    return comparisons
