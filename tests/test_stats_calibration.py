"""Statistical calibration of the rig's analysis, by simulation.

The promise: simulated A/A experiments (equal success probability in both arms, heterogeneous
tasks) reject at no more than the nominal rate, within Monte Carlo error; a planted effect is
found with the power `rig power` predicts, within tolerance. Every simulated experiment goes
through the real compare_success / compare_metric on a real DataFrame (fewer bootstrap draws than
a report, to keep this file fast); nothing here reimplements a test.

Tolerances: a rate estimated from n independent experiments has standard error
sqrt(p (1 - p) / n); we allow 3 standard errors (a false alarm about once in 700 runs of this
file per check, and the seeds are fixed, so the outcome is in fact deterministic).
"""

import math

import numpy as np
import pandas as pd
import pytest

from rig.analysis import (
    compare_metric,
    compare_success,
    power_cost,
    power_success,
    reps_for_power,
    reps_for_power_cost,
    wilcoxon_min_p,
)
from rig.analysis.power import _task_rates

ALPHA = 0.05
N_EXPERIMENTS = 400
N_TASKS = 5
BOOT = 200  # bootstrap draws per simulated experiment: enough for a 95% interval's coverage


def _frame(successes_a: np.ndarray, successes_b: np.ndarray, reps: int) -> pd.DataFrame:
    """The runs of one simulated experiment, as load_runs would give them (the columns used)."""
    rows = []
    for t, (ka, kb) in enumerate(zip(successes_a, successes_b, strict=True)):
        rows += [(f"t{t}", "a", r < ka) for r in range(reps)]
        rows += [(f"t{t}", "b", r < kb) for r in range(reps)]
    return pd.DataFrame(rows, columns=["task", "condition", "success"])


def _three_se(p: float, n: int) -> float:
    return 3 * math.sqrt(p * (1 - p) / n)


def test_aa_success_rejects_at_most_nominal_and_the_interval_covers_zero() -> None:
    # Heterogeneous tasks, drawn independently of the power module's model: each task has its own
    # success rate anywhere in [0.05, 0.95], the same in both arms.
    rng = np.random.default_rng(2026)
    reps = 10
    rejections = covered = 0
    for i in range(N_EXPERIMENTS):
        rates = rng.uniform(0.05, 0.95, N_TASKS)
        df = _frame(rng.binomial(reps, rates), rng.binomial(reps, rates), reps)
        comparison = compare_success(df, "a", "b", n_boot=BOOT, seed=i)
        rejections += comparison.p_value < ALPHA
        covered += comparison.ci_low <= 0 <= comparison.ci_high
    rejection_rate = rejections / N_EXPERIMENTS
    print(
        f"A/A success: rejection rate {rejection_rate:.4f}, interval coverage {covered / N_EXPERIMENTS:.4f}"
    )
    assert rejection_rate <= ALPHA + _three_se(ALPHA, N_EXPERIMENTS)
    # The two-stage bootstrap is conservative by construction (run noise counted twice), so its
    # nominal 95% interval should cover 0 at least 95% of the time; 0.90 leaves room for the
    # percentile interval's known small-sample shortfall with 5 tasks and 200 draws.
    assert covered / N_EXPERIMENTS >= 0.90


def test_aa_cost_rejects_at_most_nominal() -> None:
    rng = np.random.default_rng(7)
    n_tasks, reps, n = 8, 6, 300
    rejections = 0
    for i in range(n):
        task_medians = np.exp(rng.standard_normal(n_tasks))
        rows = [
            (f"t{t}", arm, task_medians[t] * math.exp(0.5 * rng.standard_normal()))
            for t in range(n_tasks)
            for arm in ("a", "b")
            for _ in range(reps)
        ]
        df = pd.DataFrame(rows, columns=["task", "condition", "cost_usd"])
        rejections += compare_metric(df, "cost_usd", "a", "b", n_boot=20, seed=i).p_value < ALPHA
    assert rejections / n <= ALPHA + _three_se(ALPHA, n)


def test_planted_effect_found_with_predicted_power() -> None:
    base, effect, reps = 0.4, 0.3, 5  # chosen so the power is mid-range, where a mismatch shows most
    # The design is what the power module says: check the planted effect really averages 0.3.
    p_a, p_b = _task_rates(base, effect, N_TASKS, 1.0, 20_000, np.random.default_rng(0))
    assert p_a.mean() == pytest.approx(base, abs=0.01)
    assert (p_b - p_a).mean() == pytest.approx(effect, abs=0.01)

    n_predict = 2000
    predicted = power_success(base, effect, N_TASKS, reps, alpha=ALPHA, n_sim=n_predict, seed=1)
    rng = np.random.default_rng(2)
    p_a, p_b = _task_rates(base, effect, N_TASKS, 1.0, N_EXPERIMENTS, rng)
    succ_a, succ_b = rng.binomial(reps, p_a), rng.binomial(reps, p_b)
    rejections = sum(
        compare_success(_frame(succ_a[i], succ_b[i], reps), "a", "b", n_boot=50, seed=i).p_value < ALPHA
        for i in range(N_EXPERIMENTS)
    )
    observed = rejections / N_EXPERIMENTS
    print(f"planted effect: predicted power {predicted:.4f}, observed {observed:.4f}")
    # Both estimates are Monte Carlo: 3 standard errors of their difference plus 0.02 of slack.
    se = math.sqrt(predicted * (1 - predicted) * (1 / n_predict + 1 / N_EXPERIMENTS))
    assert abs(observed - predicted) <= 3 * se + 0.02
    assert 0.3 < predicted < 0.8  # the design is informative: neither hopeless nor certain


def test_planted_cost_effect_found_with_predicted_power() -> None:
    # power_cost's model, written out here: log cost = log(task median) + sigma N(0, 1), task
    # medians log-normal (sd 1) across tasks, arm b's median `ratio` times arm a's.
    ratio, sigma, n_tasks, reps, n = 0.7, 0.5, 8, 6, 300
    n_predict = 2000
    predicted = power_cost(ratio, sigma, n_tasks, reps, alpha=ALPHA, n_sim=n_predict, seed=1)
    rng = np.random.default_rng(4)
    rejections = 0
    for i in range(n):
        task_medians = np.exp(rng.standard_normal(n_tasks))
        rows = [
            (f"t{t}", arm, scale * task_medians[t] * math.exp(sigma * rng.standard_normal()))
            for t in range(n_tasks)
            for arm, scale in (("a", 1.0), ("b", ratio))
            for _ in range(reps)
        ]
        df = pd.DataFrame(rows, columns=["task", "condition", "cost_usd"])
        rejections += compare_metric(df, "cost_usd", "a", "b", n_boot=20, seed=i).p_value < ALPHA
    observed = rejections / n
    print(f"planted cost effect: predicted power {predicted:.4f}, observed {observed:.4f}")
    se = math.sqrt(predicted * (1 - predicted) * (1 / n_predict + 1 / n))
    assert abs(observed - predicted) <= 3 * se + 0.02


def test_power_grows_with_reps_and_effect() -> None:
    powers = [power_success(0.3, 0.3, N_TASKS, reps, n_sim=300, seed=5) for reps in (2, 6, 20)]
    assert powers[0] < powers[1] < powers[2]
    assert power_success(0.3, 0.0, N_TASKS, 10, n_sim=1000, seed=5) <= ALPHA + _three_se(ALPHA, 1000)
    small = reps_for_power(0.3, 0.2, N_TASKS, n_sim=200, seed=3)
    large = reps_for_power(0.3, 0.4, N_TASKS, n_sim=200, seed=3)
    assert large < small
    assert power_success(0.3, 0.4, N_TASKS, large, n_sim=200, seed=3) >= 0.8
    assert power_success(0.3, 0.4, N_TASKS, large - 1, n_sim=200, seed=3) < 0.8
    with pytest.raises(ValueError, match="even with 8 repetitions"):
        reps_for_power(0.5, 0.02, N_TASKS, n_sim=100, max_reps=8)
    with pytest.raises(ValueError, match="between 0 and 1"):
        power_success(0.9, 0.2, N_TASKS, 5)


def test_wilcoxon_minimum_p_guard() -> None:
    assert wilcoxon_min_p(5) == 0.0625 > ALPHA
    message = "with 5 tasks the Wilcoxon test cannot reach p < 0.05; use more tasks"
    with pytest.raises(ValueError, match=message):
        power_cost(0.5, 0.5, 5, 10)
    with pytest.raises(ValueError, match=message):
        reps_for_power_cost(0.5, 0.5, 5)
    # 6 tasks can (2 / 2**6 = 0.031), and so can 5 at a looser alpha.
    assert power_cost(0.5, 0.5, 6, 10, n_sim=200) > 0.5
    assert power_cost(0.5, 0.5, 5, 10, alpha=0.1, n_sim=200) > 0.5
    fewer = reps_for_power_cost(0.6, 0.5, 8, n_sim=200)
    more = reps_for_power_cost(0.8, 0.5, 8, n_sim=200)
    assert fewer < more
