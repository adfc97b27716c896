"""Coverage of compare_success's and compare_metric's 95% intervals, old method against new.

Success: m tasks with logits mu + 1.2 Z (Z standard normal, mu = 0), arm b shifted by `effect`
logits (0 or 1) in every task, `reps` runs per task per arm. Two estimands:
- tasks as sampled: E[expit(L + effect) - expit(L)] over the task population (Gauss-Hermite);
- these tasks: the mean over the m sampled tasks of p_b - p_a (the pooled difference of their true
  rates, every task having `reps` runs per arm).
Metric: log cost of a run = task log-median (N(0, 1) across tasks) + 0.5 N(0, 1), arm b's median
`ratio` times arm a's in every task, so both estimands are that ratio.

"old" is the two-stage task-then-runs bootstrap percentile interval used before issue 16 (written
out here, since the rig no longer has it); "new" is rig.analysis.success_interval /
median_ratio_interval. Each coverage is printed with its Monte Carlo standard error.

    .venv/bin/python bench/coverage_intervals.py [--sims 2000] [--metric-sims 1000] [--boot 1000]
"""

import argparse
import math
import time

import numpy as np
from scipy.special import expit

from rig.analysis import THESE_TASKS, median_ratio_interval, success_interval

TASKS = (5, 10, 20, 50)
REPS = (3, 5, 10)
SPREAD = 1.2
_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(80)
_WEIGHTS = _WEIGHTS / _WEIGHTS.sum()


def old_success(ka: np.ndarray, kb: np.ndarray, reps: int, n_boot: int, rng: np.random.Generator) -> tuple:
    low, high = np.empty(len(ka)), np.empty(len(ka))
    m = ka.shape[1]
    for i in range(len(ka)):
        tasks = rng.integers(0, m, size=(n_boot, m))
        draws = rng.binomial(reps, kb[i][tasks] / reps).sum(1) - rng.binomial(reps, ka[i][tasks] / reps).sum(
            1
        )
        low[i], high[i] = np.quantile(draws / (reps * m), [0.025, 0.975])
    return low, high


def old_ratio(va: np.ndarray, vb: np.ndarray, n_boot: int, rng: np.random.Generator) -> tuple[float, float]:
    m, reps = va.shape
    tasks = rng.integers(0, m, size=(n_boot, m))

    def pooled(v: np.ndarray) -> np.ndarray:
        runs = rng.integers(0, reps, size=(n_boot, m, reps))
        return np.median(np.take_along_axis(v[tasks], runs, axis=2).reshape(n_boot, -1), axis=1)

    low, high = np.quantile(pooled(vb) / pooled(va), [0.025, 0.975])
    return float(low), float(high)


def cover(low: np.ndarray, high: np.ndarray, truth: np.ndarray | float) -> str:
    rate = float(np.mean((low <= truth) & (truth <= high)))
    return f"{rate:.3f}±{math.sqrt(rate * (1 - rate) / len(low)):.3f}"


def success_grid(sims: int, n_boot: int, rng: np.random.Generator) -> None:
    print(f"success, {sims} experiments per cell; coverage ± MC SE; mean width (pp)")
    print(
        "effect tasks reps | as sampled: old     new         | these tasks: old   new         "
        "| width old new these"
    )
    for effect in (0.0, 1.0):
        population = float(np.dot(_WEIGHTS, expit(effect + SPREAD * _NODES) - expit(SPREAD * _NODES)))
        for m in TASKS:
            for reps in REPS:
                logits = SPREAD * rng.standard_normal((sims, m))
                p_a, p_b = expit(logits), expit(logits + effect)
                ka, kb = rng.binomial(reps, p_a), rng.binomial(reps, p_b)
                these = (p_b - p_a).mean(axis=1)
                runs = np.full_like(ka, reps)
                old = old_success(ka, kb, reps, n_boot, rng)
                new = success_interval(ka, runs, kb, runs)
                cond = success_interval(ka, runs, kb, runs, THESE_TASKS)
                print(
                    f"{effect:6.0f} {m:5d} {reps:4d} | {cover(*old, population)} {cover(*new, population)} "
                    f"| {cover(*old, these)} {cover(*cond, these)} "
                    f"| {100 * np.mean(old[1] - old[0]):5.1f} {100 * np.mean(new[1] - new[0]):5.1f}"
                    f" {100 * np.mean(cond[1] - cond[0]):5.1f}",
                    flush=True,
                )


def metric_grid(sims: int, n_boot: int, rng: np.random.Generator) -> None:
    print(f"ratio of medians, {sims} experiments per cell; coverage ± MC SE; mean width of the log ratio")
    print("ratio tasks reps | old         new         | width old new")
    for ratio in (1.0, 0.7):
        for m in TASKS:
            for reps in REPS:
                old_lo, old_hi, new_lo, new_hi = (np.empty(sims) for _ in range(4))
                for i in range(sims):
                    log_median = rng.standard_normal((m, 1))
                    va = np.exp(log_median + 0.5 * rng.standard_normal((m, reps)))
                    vb = ratio * np.exp(log_median + 0.5 * rng.standard_normal((m, reps)))
                    old_lo[i], old_hi[i] = old_ratio(va, vb, n_boot, rng)
                    new_lo[i], new_hi[i] = median_ratio_interval(list(va), list(vb))
                print(
                    f"{ratio:5.1f} {m:5d} {reps:4d} | "
                    f"{cover(old_lo, old_hi, ratio)} {cover(new_lo, new_hi, ratio)} "
                    f"| {np.mean(np.log(old_hi / old_lo)):.3f} {np.mean(np.log(new_hi / new_lo)):.3f}",
                    flush=True,
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sims", type=int, default=2000, help="simulated experiments per success cell")
    parser.add_argument("--metric-sims", type=int, default=1000, help="simulated experiments per ratio cell")
    parser.add_argument("--boot", type=int, default=1000, help="draws of the old bootstrap")
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--only", choices=("success", "metric"), help="run one grid")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    if args.only != "metric":
        success_grid(args.sims, args.boot, rng)
    if args.only != "success":
        metric_grid(args.metric_sims, args.boot // 2, rng)
    print(f"{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
