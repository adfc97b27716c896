"""Power by simulation: how many repetitions an experiment needs before its test can see an effect.

Each function simulates the rig's own design (n_tasks tasks, `reps` runs per task per arm) many
times and analyses every simulated experiment with exactly the test a report would use (for success
the test of the experiment's estimand: `population_test` or `stratified_test`; `paired_median_test`
for cost), so the power printed by `rig power` is the power of the analysis that will actually run,
discreteness and all.

Success model: tasks differ in difficulty. Each task's success rate under the reference arm is
logit-normal: logit p_a = mu + task_spread * Z, Z standard normal, with mu chosen so that the
*average* rate over tasks is base_rate. Arm b shifts every task by the same amount delta on the
logit scale, with delta chosen so that the *average* difference over tasks is exactly `effect`.
The logit shift (rather than adding `effect` to every task's probability and clipping) keeps
every rate inside (0, 1) and reflects ceiling and floor effects: a task that already succeeds 95%
of the time cannot gain 30 points, so mid-difficulty tasks carry most of the effect, as in real
experiments. Averages over tasks are computed by Gauss-Hermite quadrature.

Cost model: log cost of a run = log(task median) + sigma * N(0, 1); task medians are log-normal
across tasks (sd `task_sd` of the log, default 1: tasks cost up to a few times more than others);
arm b's median is `ratio` times arm a's in every task.

The searches for repetitions reuse the same seed at every candidate (common random numbers): the
candidates share their Monte Carlo noise instead of each having its own, so the estimated power
rises smoothly with reps and the bisection does not chase noise.
"""

from collections.abc import Callable

import numpy as np
from scipy import optimize
from scipy.special import expit

from rig.analysis.stats import (
    ESTIMANDS,
    POPULATION,
    paired_median_test,
    population_test,
    stratified_test,
    wilcoxon_min_p,
)

_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(80)
_WEIGHTS = _WEIGHTS / _WEIGHTS.sum()


def _mean_rate(location: float, spread: float) -> float:
    """E[expit(location + spread * Z)] for standard normal Z (Gauss-Hermite quadrature)."""
    return float(np.dot(_WEIGHTS, expit(location + spread * _NODES)))


def _check_probability(name: str, value: float) -> None:
    if not 0 < value < 1:
        raise ValueError(f"{name} must be strictly between 0 and 1, got {value:g}")


def _logit_design(base_rate: float, effect: float, task_spread: float) -> tuple[float, float]:
    """(mu, delta): task logits ~ mu + spread Z average base_rate; + delta averages base + effect."""
    _check_probability("base_rate", base_rate)
    _check_probability("base_rate + effect", base_rate + effect)
    if task_spread < 0:
        raise ValueError(f"task_spread must be >= 0, got {task_spread:g}")
    mu = optimize.brentq(lambda x: _mean_rate(x, task_spread) - base_rate, -60, 60, xtol=1e-12)
    if effect == 0:
        return mu, 0.0
    delta = optimize.brentq(
        lambda d: _mean_rate(mu + d, task_spread) - (base_rate + effect), -120, 120, xtol=1e-12
    )
    return mu, delta


def _task_rates(
    base_rate: float,
    effect: float,
    n_tasks: int,
    task_spread: float,
    n_sim: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-task success rates (p_a, p_b), each of shape (n_sim, n_tasks), as the module describes."""
    mu, delta = _logit_design(base_rate, effect, task_spread)
    location = mu + task_spread * rng.standard_normal((n_sim, n_tasks))
    return expit(location), expit(location + delta)


def _check_design(n_tasks: int, reps: int, alpha: float, n_sim: int) -> None:
    if n_tasks < 1 or reps < 1 or n_sim < 1:
        raise ValueError(f"need n_tasks, reps and n_sim >= 1, got {n_tasks}, {reps}, {n_sim}")
    _check_probability("alpha", alpha)


def power_success(
    base_rate: float,
    effect: float,
    n_tasks: int,
    reps: int,
    alpha: float = 0.05,
    n_sim: int = 400,
    seed: int = 0,
    task_spread: float = 1.0,
    estimand: str = POPULATION,
) -> float:
    """Probability that compare_success's test of `estimand` gives p < alpha for a true difference
    `effect`.

    Simulates `n_sim` experiments of `n_tasks` heterogeneous tasks (the logit-normal model of the
    module docstring: average reference rate `base_rate`, average difference `effect`), `reps`
    runs per task per arm, and tests each as compare_success does for that estimand: POPULATION,
    `population_test` (the Wald t-test of the task-clustered difference; where every task shows the
    same difference, the exact test, as compare_success falls back); THESE_TASKS, `stratified_test`
    (the exact conditional test stratified by task). Returns the fraction with p < alpha; with
    effect 0 that is the test's false-positive rate.
    """
    _check_design(n_tasks, reps, alpha, n_sim)
    if estimand not in ESTIMANDS:
        raise ValueError(f"unknown estimand {estimand!r}; use {' or '.join(map(repr, ESTIMANDS))}")
    rng = np.random.default_rng(seed)
    p_a, p_b = _task_rates(base_rate, effect, n_tasks, task_spread, n_sim, rng)
    succ_a = rng.binomial(reps, p_a)
    succ_b = rng.binomial(reps, p_b)
    runs = np.full(n_tasks, reps)
    if estimand == POPULATION:
        p = population_test(
            succ_a, np.broadcast_to(runs, succ_a.shape), succ_b, np.broadcast_to(runs, succ_b.shape)
        )
        for i in np.flatnonzero(np.isnan(p)) if n_tasks > 1 else ():
            p[i] = stratified_test(succ_a[i], runs, succ_b[i], runs)[0]
        return float(np.mean(p < alpha))
    # The p-value depends only on the multiset of per-task (successes a, successes b) when every
    # cell has `reps` runs, and simulated experiments repeat a lot: test each distinct one once.
    cache: dict[bytes, float] = {}
    rejected = 0
    for ka, kb in zip(succ_a, succ_b, strict=True):
        pairs = np.stack([ka, kb], axis=1)
        key = pairs[np.lexsort((kb, ka))].tobytes()
        p = cache.get(key)
        if p is None:
            p = cache[key] = stratified_test(ka, runs, kb, runs)[0]
        rejected += p < alpha
    return rejected / n_sim


def _smallest_reps(power_at: Callable[[int], float], target: float, max_reps: int, what: str) -> int:
    """Smallest reps with power_at(reps) >= target: doubling, then bisection."""
    if not 0 < target < 1:
        raise ValueError(f"target power must be strictly between 0 and 1, got {target:g}")
    if max_reps < 1:
        raise ValueError(f"max_reps must be >= 1, got {max_reps}")
    low, high = 0, 1  # power_at(low) < target is known (or low is 0); high is the candidate
    while True:
        power = power_at(high)
        if power >= target:
            break
        if high >= max_reps:
            raise ValueError(
                f"{what}: power {power:.2f} < {target:.2f} even with {max_reps} repetitions per task; "
                "use more tasks or look for a larger effect"
            )
        low, high = high, min(2 * high, max_reps)
    while high - low > 1:
        middle = (low + high) // 2
        if power_at(middle) >= target:
            high = middle
        else:
            low = middle
    return high


def reps_for_power(
    base_rate: float,
    effect: float,
    n_tasks: int,
    alpha: float = 0.05,
    target: float = 0.8,
    n_sim: int = 400,
    seed: int = 0,
    max_reps: int = 200,
    task_spread: float = 1.0,
    estimand: str = POPULATION,
) -> int:
    """Smallest repetitions per task per arm for which power_success (of `estimand`) reaches `target`.

    Searched upward (doubling, then bisection) with the same seed at every candidate; raises
    ValueError if `max_reps` repetitions are not enough.
    """
    _logit_design(base_rate, effect, task_spread)  # validate once, with a clear message

    def power_at(reps: int) -> float:
        return power_success(base_rate, effect, n_tasks, reps, alpha, n_sim, seed, task_spread, estimand)

    what = f"success {base_rate:g} -> {base_rate + effect:g} over {n_tasks} tasks"
    return _smallest_reps(power_at, target, max_reps, what)


def _check_wilcoxon_reachable(n_tasks: int, alpha: float) -> None:
    # The signed-rank test over n tasks cannot give p below 2 / 2**n, however large the effect and
    # however many repetitions: 5 tasks -> 0.0625. Searching reps would loop for nothing.
    if wilcoxon_min_p(n_tasks) >= alpha:
        raise ValueError(f"with {n_tasks} tasks the Wilcoxon test cannot reach p < {alpha:g}; use more tasks")


def power_cost(
    ratio: float,
    sigma: float,
    n_tasks: int,
    reps: int,
    alpha: float = 0.05,
    n_sim: int = 400,
    seed: int = 0,
    task_sd: float = 1.0,
) -> float:
    """Probability that compare_metric's test gives p < alpha when arm b's median cost is `ratio`
    times arm a's.

    Simulates `n_sim` experiments: per-run cost log-normal with log-sd `sigma` around a per-task
    median, task medians log-normal across tasks (log-sd `task_sd`), `reps` runs per task per arm;
    each is tested like compare_metric does: Wilcoxon signed-rank on the per-task paired medians
    (`paired_median_test`). Raises ValueError when n_tasks is too small for that test to ever
    give p < alpha (e.g. 5 tasks at alpha 0.05).
    """
    _check_design(n_tasks, reps, alpha, n_sim)
    _check_wilcoxon_reachable(n_tasks, alpha)
    if ratio <= 0 or sigma < 0 or task_sd < 0:
        raise ValueError(f"need ratio > 0, sigma >= 0, task_sd >= 0; got {ratio:g}, {sigma:g}, {task_sd:g}")
    rng = np.random.default_rng(seed)
    log_median = task_sd * rng.standard_normal((n_sim, n_tasks, 1))
    cost_a = np.exp(log_median + sigma * rng.standard_normal((n_sim, n_tasks, reps)))
    cost_b = ratio * np.exp(log_median + sigma * rng.standard_normal((n_sim, n_tasks, reps)))
    differences = np.median(cost_b, axis=2) - np.median(cost_a, axis=2)
    return float(np.mean(paired_median_test(differences) < alpha))


def reps_for_power_cost(
    ratio: float,
    sigma: float,
    n_tasks: int,
    alpha: float = 0.05,
    target: float = 0.8,
    n_sim: int = 400,
    seed: int = 0,
    max_reps: int = 200,
    task_sd: float = 1.0,
) -> int:
    """Smallest repetitions per task per arm for which power_cost reaches `target`.

    Raises ValueError at once when n_tasks cannot reach p < alpha at all (see power_cost), and
    when `max_reps` repetitions are not enough.
    """
    _check_wilcoxon_reachable(n_tasks, alpha)

    def power_at(reps: int) -> float:
        return power_cost(ratio, sigma, n_tasks, reps, alpha, n_sim, seed, task_sd)

    what = f"median cost x{ratio:g} (sigma {sigma:g}) over {n_tasks} tasks"
    return _smallest_reps(power_at, target, max_reps, what)


def min_detectable_effect(
    base_rate: float,
    n_tasks: int,
    reps: int,
    alpha: float = 0.05,
    target: float = 0.8,
    n_sim: int = 400,
    seed: int = 0,
    task_spread: float = 1.0,
    estimand: str = POPULATION,
    tolerance: float = 0.005,
) -> float:
    """Smallest difference in success rate that compare_success's test of `estimand` finds (p <
    alpha) with probability at least `target`, at `n_tasks` tasks x `reps` runs per task per arm.

    The inverse of power_success, with its task model (average reference rate `base_rate`,
    logit-normal task difficulty of spread `task_spread`, a common logit shift): bisection on the
    difference to within `tolerance`, with the same seed at every candidate (common random numbers,
    as reps_for_power). The difference is searched toward 0.5, where there is more room (an increase
    from a base rate up to 0.5, a decrease from one above): the two-sided test treats both
    directions alike, and the other side may not leave room for any detectable difference. Returns
    the difference's size (positive), the upper end of the last bisection interval; NaN when even
    the largest difference there is room for (to within 0.001 of 0 or 1) has power below `target`:
    nothing is detectable at this size.
    """
    _check_probability("base_rate", base_rate)
    _check_design(n_tasks, reps, alpha, n_sim)
    if not 0 < target < 1:
        raise ValueError(f"target power must be strictly between 0 and 1, got {target:g}")
    if tolerance <= 0:
        raise ValueError(f"tolerance must be > 0, got {tolerance:g}")
    sign = 1.0 if base_rate <= 0.5 else -1.0
    room = (1 - base_rate if sign > 0 else base_rate) - 1e-3

    def power_at(size: float) -> float:
        return power_success(
            base_rate, sign * size, n_tasks, reps, alpha, n_sim, seed, task_spread, estimand=estimand
        )

    if room <= 0 or power_at(room) < target:
        return float("nan")
    low, high = 0.0, room
    while high - low > tolerance:
        middle = (low + high) / 2
        if power_at(middle) >= target:
            high = middle
        else:
            low = middle
    return high


def task_spread_for(base_rate: float, variance: float, max_spread: float = 4.0) -> float:
    """The `task_spread` of the logit-normal task model whose task success rates, averaging
    `base_rate`, have variance `variance` across tasks (0 for no variance; `max_spread` where that
    spread is not enough: the rates' variance can never reach base_rate (1 - base_rate)).

    Lets a simulation use the spread of a real experiment's tasks, e.g. estimated from observed
    per-task rates with the binomial noise of their runs taken out.
    """
    _check_probability("base_rate", base_rate)
    if variance <= 0:
        return 0.0

    def variance_at(spread: float) -> float:
        mu = optimize.brentq(lambda x: _mean_rate(x, spread) - base_rate, -60, 60, xtol=1e-12)
        return float(np.dot(_WEIGHTS, expit(mu + spread * _NODES) ** 2)) - base_rate**2

    if variance_at(max_spread) <= variance:
        return max_spread
    return float(optimize.brentq(lambda s: variance_at(s) - variance, 0.0, max_spread, xtol=1e-6))
