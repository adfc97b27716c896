"""Flakiness per task: how often a condition's repetitions of one task agree.

An agent that solves a task one time in two is not the agent that solves it every time, even at
the same success rate. Two numbers say how much of a condition's success is luck:

- **pass^k** (k = 1..K), as tau-bench defines it: the chance that k runs of a task, drawn anew,
  *all* pass, averaged over the tasks. A task run n times with c successes estimates it without
  bias by C(c, k) / C(n, k): the share of its k-subsets of runs that all passed (given the task's
  true rate p, the expectation of C(c, k) / C(n, k) is p^k, since a k-subset of independent runs
  all pass with probability p^k). The condition's pass^k is the plain mean over its tasks, each
  task counting once whatever its runs. K is the smallest number of runs any task of the condition
  has, so every pass^k averages the same tasks. pass^1 is the mean per-task success rate; pass^k
  falls with k the faster, the flakier the tasks (for a task with p = 0.5, pass^4 = 0.06).
- **flip rate**: the share of tasks whose repetitions disagree (neither all passed nor all failed),
  over the tasks run at least twice. Its 95% interval is the exact (Clopper-Pearson) binomial
  interval over tasks: each task is one independent draw from the tasks the condition could meet
  and either flips or not, so the tasks are the clusters and the interval needs no model of the runs
  within them; exact, so its coverage is at least 95% even at 5 tasks. The chance that a task flips
  grows with its runs (a task with p = 0.5 flips with probability 1 - 2 * 0.5^n), so a flip rate is
  a statement about that many repetitions: compare flip rates at equal repetitions.

Both read the `success` column of `load_runs`' frame (one row per run) and refuse anything but 0/1
as `binary_outcomes` does.
"""

import math

import numpy as np
import pandas as pd
from scipy import stats as sps

from rig.analysis.stats import CONFIDENCE, binary_outcomes

TASK_COLUMNS: tuple[str, ...] = ("condition", "task", "runs", "successes", "flips")
# `flakiness`' columns are these, with pass^1 .. pass^K (`pass_column`) between the two.
CONDITION_COLUMNS: tuple[str, ...] = ("condition", "tasks", "runs", "k_max")
FLIP_COLUMNS: tuple[str, ...] = ("flip_tasks", "flipping", "flip_rate", "flip_ci_low", "flip_ci_high")


def pass_column(k: int) -> str:
    """The column of pass^k in `flakiness` and `task_flakiness`."""
    return f"pass^{k}"


def _pass_hat(successes: np.ndarray, runs: np.ndarray, k_max: int) -> np.ndarray:
    """C(c, k) / C(n, k) for k = 1..k_max, one row per task; NaN where k > n.

    Computed as the product over i < k of (c - i) / (n - i): once c - i reaches 0 every later
    factor keeps it 0, and no binomial coefficient (huge at hundreds of runs) is ever formed.
    """
    c = successes[:, None].astype(float)
    n = runs[:, None].astype(float)
    i = np.arange(k_max, dtype=float)[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        factors = np.clip(c - i, 0, None) / (n - i)
    values = np.cumprod(np.where(i < n, factors, 1.0), axis=1)
    return np.where(i < n, values, math.nan)


def _arms(df: pd.DataFrame) -> list[str]:
    """The conditions in the order load_runs declared them, then any others as they come."""
    present = list(dict.fromkeys(df["condition"].tolist()))
    declared = [c for c in df.attrs.get("conditions") or [] if c in present]
    return declared + [c for c in present if c not in declared]


def _per_task(df: pd.DataFrame, column: str) -> pd.DataFrame:
    """Runs and successes per (condition, task), conditions in declared order, tasks as they come."""
    for name in ("task", "condition"):
        if name not in df.columns:
            raise ValueError(f"no column {name!r}: flakiness needs a task and a condition per run")
        if df[name].isna().any():
            raise ValueError(f"column {name!r} has missing values; every run needs one")
    outcomes = binary_outcomes(df, column)
    frame = pd.DataFrame({"condition": df["condition"].to_numpy(), "task": df["task"].to_numpy()})
    frame["success"] = outcomes
    cells = frame.groupby(["condition", "task"], sort=False)["success"].agg(runs="size", successes="sum")
    cells = cells.reset_index()
    rank = {arm: i for i, arm in enumerate(_arms(df))}
    order = sorted(range(len(cells)), key=lambda i: rank[cells["condition"].iat[i]])
    return cells.iloc[order].reset_index(drop=True)


def task_flakiness(df: pd.DataFrame, column: str = "success") -> pd.DataFrame:
    """One row per (condition, task): `runs`, `successes`, `flips` (the runs disagree: some
    passed, some failed) and pass^1 .. pass^n (`pass_column(k)`: C(c, k) / C(n, k), the unbiased
    estimate of the chance that k runs all pass; NaN beyond the task's own n runs).

    `df` is one row per run (`load_runs`' frame, or any frame with `task`, `condition` and a 0/1
    `column`); a non-binary outcome is refused in one line (`binary_outcomes`).
    """
    cells = _per_task(df, column)
    runs = cells["runs"].to_numpy()
    successes = cells["successes"].to_numpy()
    out = cells.astype({"runs": "int64", "successes": "int64"})
    out["flips"] = (successes > 0) & (successes < runs)
    k_max = int(runs.max()) if len(runs) else 0
    values = _pass_hat(successes, runs, k_max)
    for k in range(1, k_max + 1):
        out[pass_column(k)] = values[:, k - 1]
    return out


def flip_interval(flipping: int, tasks: int) -> tuple[float, float]:
    """Exact (Clopper-Pearson) 95% interval of a share of tasks: (NaN, NaN) with no task."""
    if tasks == 0:
        return math.nan, math.nan
    tail = (1 - CONFIDENCE) / 2
    low = 0.0 if flipping == 0 else float(sps.beta.ppf(tail, flipping, tasks - flipping + 1))
    high = 1.0 if flipping == tasks else float(sps.beta.ppf(1 - tail, flipping + 1, tasks - flipping))
    return low, high


def flakiness(df: pd.DataFrame, column: str = "success") -> pd.DataFrame:
    """Flakiness per condition of a frame of runs (one row per run, as `load_runs` returns).

    One row per condition, in the declared order (`df.attrs["conditions"]`), with the columns
    CONDITION_COLUMNS, pass^1 .. pass^K and FLIP_COLUMNS: `tasks` and `runs`; `k_max` (K, the
    fewest runs any of its tasks has); pass^1 .. pass^K (`pass_column(k)`: the mean
    over its tasks of C(c, k) / C(n, k), NaN for k beyond this condition's K when another condition
    has more); `flip_tasks` (tasks run at least twice), `flipping` (those whose runs disagree),
    `flip_rate` = flipping / flip_tasks and its exact 95% interval [`flip_ci_low`, `flip_ci_high`]
    over tasks (NaN with no task run twice). See the module docstring for what each estimates.
    A non-binary `column` is refused in one line, as `binary_outcomes` refuses it.
    """
    per_task = task_flakiness(df, column)
    rows: list[dict[str, object]] = []
    k_all = 0
    for condition, group in per_task.groupby("condition", sort=False):
        runs = group["runs"].to_numpy()
        k_max = int(runs.min())
        k_all = max(k_all, k_max)
        twice = runs >= 2
        flipping = int(group["flips"].to_numpy()[twice].sum())
        low, high = flip_interval(flipping, int(twice.sum()))
        row: dict[str, object] = {
            "condition": condition,
            "tasks": len(group),
            "runs": int(runs.sum()),
            "k_max": k_max,
            "flip_tasks": int(twice.sum()),
            "flipping": flipping,
            "flip_rate": flipping / twice.sum() if twice.any() else math.nan,
            "flip_ci_low": low,
            "flip_ci_high": high,
        }
        for k in range(1, k_max + 1):
            row[pass_column(k)] = float(group[pass_column(k)].mean())
        rows.append(row)
    columns = [*CONDITION_COLUMNS, *(pass_column(k) for k in range(1, k_all + 1)), *FLIP_COLUMNS]
    out = pd.DataFrame(rows, columns=columns)
    return out.astype({name: "int64" for name in ("tasks", "runs", "k_max", "flip_tasks", "flipping")})
