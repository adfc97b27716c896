"""The report's three figures, drawn with matplotlib's Agg canvas.

matplotlib is imported only inside the drawing functions: `rig --help` and every other command
must not pay for it. Figures are built on a bare `Figure` attached to `FigureCanvasAgg` rather
than through pyplot, so no global backend state is touched and nothing ever tries a display.
PNG metadata is cleared so the same data and seed give the same bytes.

The functions take plain data (lists, dicts, `Effect`), so the report's worker process
(rig.report.background) can draw them without importing the statistics layer.
"""

import math
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# One color per arm, the same in every figure (matplotlib's tab10, colorblind-tolerable order).
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
DPI = 130


class Effect(NamedTuple):
    """What the forest plot draws of one comparison (the fields of rig.analysis.Comparison it reads)."""

    metric: str
    a: str
    b: str
    effect_kind: str
    effect: float
    ci_low: float
    ci_high: float
    p_adjusted: float | None


def warm_up() -> None:
    """Import what drawing needs (half a second), before the first figure is asked for."""
    import matplotlib.backends.backend_agg
    import matplotlib.figure
    import matplotlib.ticker  # noqa: F401


def arm_color(index: int) -> str:
    """The color of the arm at `index` in the report's arm order."""
    return PALETTE[index % len(PALETTE)]


def _new_figure(width: float, height: float) -> "Figure":
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: "Figure", path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    # No "Software" tag: the bytes depend on the data, not on the matplotlib build.
    fig.savefig(path, format="png", dpi=DPI, metadata={"Software": None})
    return path


def _style_axes(ax: Any) -> None:
    ax.spines["top"].set_visible(False)
    ax.spines["right"].set_visible(False)
    ax.set_axisbelow(True)


# Past this many tasks a column per task would make the figure wider than any page (and take most
# of a minute to draw, for an imported benchmark of hundreds): each task is then one dot.
MAX_TASK_COLUMNS = 40


def success_caption(n_tasks: int, arm_word: str) -> str:
    """The caption of what `success_by_task` draws for `n_tasks` tasks."""
    if n_tasks > MAX_TASK_COLUMNS:
        return (
            f"Success rate per {arm_word}: each of the {n_tasks} tasks a dot at its success rate, the "
            "dots of one rate spread as wide as they are many; ALL with its 95% CI clustered by task "
            "(label: successes/runs)."
        )
    return (
        f"Success rate per task and {arm_word} with 95% CIs (a task: Wilson; ALL: clustered by task; "
        "labels: successes/runs)."
    )


def success_by_task(
    cells: list[dict[str, Any]], arms: list[str], tasks: list[str], path: Path, arm_word: str = "condition"
) -> Path:
    """Success rate with its 95% CI per task (Wilson) and over all tasks (the cell table's
    task-clustered interval) for every arm; past MAX_TASK_COLUMNS tasks, each task's rate as a dot
    beside its arm's ALL interval (`success_caption` says which).

    `cells` are the rows of `cell_table`'s frame (`to_dict("records")`); `tasks` the task order
    (the "ALL" rows go last, set apart); `arm_word` names what an arm is ("condition", or
    "experiment" for `rig report --vs`).
    """
    from matplotlib.ticker import PercentFormatter

    if len(tasks) > MAX_TASK_COLUMNS:
        return _success_by_arm(cells, arms, path, arm_word)
    columns = [*tasks, "ALL"]
    fig = _new_figure(max(6.5, 1.15 * len(columns) + 2.5), 4.4)
    ax = fig.add_subplot()
    _style_axes(ax)
    # The ALL group is pushed right by a gap so it does not read as one more task.
    xs = [float(i) for i in range(len(tasks))] + [len(tasks) + 0.4]
    width = 0.8 / max(len(arms), 1)
    labelled: set[str] = set()
    by_cell = {(str(row["task"]), str(row["condition"])): row for row in reversed(cells)}
    for i, arm in enumerate(arms):
        offset = (i - (len(arms) - 1) / 2) * width
        for x, task in zip(xs, columns, strict=True):
            row = by_cell.get((task, arm))
            if row is None or int(row["n"]) == 0:
                continue
            rate, lo, hi = (float(row[c]) for c in ("success_rate", "ci_low", "ci_high"))
            k, n = int(row["successes"]), int(row["n"])
            ax.errorbar(
                x + offset,
                rate,
                yerr=[[rate - lo], [hi - rate]],
                fmt="o",
                color=arm_color(i),
                capsize=3,
                markersize=6,
                elinewidth=1.4,
                label=None if arm in labelled else arm,
            )
            labelled.add(arm)
            ax.annotate(
                f"{k}/{n}",
                (x + offset, hi),
                xytext=(0, 3),
                textcoords="offset points",
                ha="center",
                fontsize=7,
                color="#444444",
            )
    ax.axvline(len(tasks) - 0.3, color="#bbbbbb", linestyle="--", linewidth=0.8)
    ax.set_xticks(
        xs, columns, rotation=20 if len(columns) > 4 else 0, ha="right" if len(columns) > 4 else "center"
    )
    ax.set_xlim(-0.6, xs[-1] + 0.6)
    ax.set_ylim(-0.03, 1.12)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.grid(axis="y", color="#e5e5e5")
    ax.set_ylabel("success rate (95% CI)")
    ax.set_title(f"Success rate per task and {arm_word}", loc="left", fontsize=11)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, title=arm_word, fontsize=9)
    return _save(fig, path)


def _success_by_arm(cells: list[dict[str, Any]], arms: list[str], path: Path, arm_word: str) -> Path:
    """One column per arm: every task's success rate as a dot, spread sideways by its rank so that
    equal rates stay countable, and the ALL row's rate with its interval on top."""
    from matplotlib.ticker import PercentFormatter

    fig = _new_figure(max(6.5, 1.1 * len(arms) + 2.5), 4.4)
    ax = fig.add_subplot()
    _style_axes(ax)
    by_arm: dict[str, list[dict[str, Any]]] = {}
    for row in cells:
        if int(row["n"]) > 0:
            by_arm.setdefault(str(row["condition"]), []).append(row)
    for i, arm in enumerate(arms):
        rows = by_arm.get(arm, [])
        rates = [float(row["success_rate"]) for row in rows if str(row["task"]) != "ALL"]
        # Tasks of one rate spread sideways over a width that grows with their number, the most
        # common rate of the arm the widest (a histogram on its side: with one run per task every
        # dot is at 0% or 100%, and only the widths tell how many); the same bytes for the same data.
        count = Counter(rates)
        widest = max(count.values(), default=1)
        seen: Counter[float] = Counter()
        offsets = []
        for rate in rates:
            offsets.append(0.6 * (seen[rate] - (count[rate] - 1) / 2) / widest)
            seen[rate] += 1
        ax.scatter(
            [i + o for o in offsets], rates, s=9, color=arm_color(i), alpha=0.35, linewidths=0, label=arm
        )
        total = next((row for row in rows if str(row["task"]) == "ALL"), None)
        if total is None:
            continue
        rate, lo, hi = (float(total[c]) for c in ("success_rate", "ci_low", "ci_high"))
        ax.errorbar(i + 0.4, rate, yerr=[[rate - lo], [hi - rate]], fmt="D", color=arm_color(i), capsize=4)
        label = f"ALL {int(total['successes'])}/{int(total['n'])}"
        ax.annotate(label, (i + 0.4, hi), xytext=(0, 3), textcoords="offset points", ha="center", fontsize=7)
    ax.set_xticks(
        range(len(arms)), arms, rotation=20 if len(arms) > 4 else 0, ha="right" if len(arms) > 4 else "center"
    )
    ax.set_xlim(-0.6, len(arms) - 0.2)
    ax.set_ylim(-0.03, 1.12)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.grid(axis="y", color="#e5e5e5")
    ax.set_ylabel("success rate")
    ax.set_title(f"Success rate per {arm_word}: every task (dots) and ALL (95% CI)", loc="left", fontsize=11)
    return _save(fig, path)


# Points drawn per arm in cost_distribution.
MAX_POINTS = 2000


def cost_distribution(
    values: dict[str, list[float]],
    arms: list[str],
    path: Path,
    *,
    cost: bool,
    seed: int = 0,
    arm_word: str = "condition",
) -> Path:
    """Per-run cost (or total tokens, when no run has a cost) per arm: box plot plus every run.

    `values` maps each arm to its per-run values (NaN already dropped); `cost` says which metric it
    is, so the axis names it. The jitter of the points is seeded, so the figure is reproducible.
    Past MAX_POINTS runs in an arm, a seeded sample of that many is drawn as points (thousands of
    points already read as a cloud); the box, the median and n are of every run.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    fig = _new_figure(max(5.5, 1.4 * len(arms) + 2.5), 4.4)
    ax = fig.add_subplot()
    _style_axes(ax)
    positions = list(range(1, len(arms) + 1))
    data = [values.get(arm, []) for arm in arms]
    drawn = [(p, d) for p, d in zip(positions, data, strict=True) if d]
    if drawn:
        box = ax.boxplot(
            [d for _, d in drawn],
            positions=[p for p, _ in drawn],
            widths=0.5,
            showfliers=False,
            patch_artist=True,
            medianprops={"color": "#222222", "linewidth": 1.6},
        )
        for patch, (p, _) in zip(box["boxes"], drawn, strict=True):
            patch.set_facecolor(arm_color(p - 1))
            patch.set_alpha(0.25)
    for i, (p, d) in enumerate(zip(positions, data, strict=True)):
        if not d:
            ax.text(p, 0.5, "no values", transform=ax.get_xaxis_transform(), ha="center", color="#888888")
            continue
        points = rng.choice(np.asarray(d), MAX_POINTS, replace=False) if len(d) > MAX_POINTS else d
        jitter = rng.uniform(-0.14, 0.14, size=len(points))
        ax.scatter(
            [p + j for j in jitter],
            points,
            s=16,
            color=arm_color(i),
            alpha=0.8,
            edgecolors="white",
            linewidths=0.4,
        )
        median = float(np.median(d))
        label = f"${median:.4f}" if cost else f"{median:,.0f}"
        ax.annotate(
            f"median {label}\nn={len(d)}",
            (p + 0.3, median),
            fontsize=7,
            va="center",
            color="#444444",
        )
    ax.set_xticks(positions, arms, rotation=15 if len(arms) > 3 else 0)
    ax.set_xlim(0.4, len(arms) + 0.9)
    ax.grid(axis="y", color="#e5e5e5")
    if cost:
        from matplotlib.ticker import FuncFormatter

        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"${v:.4f}"))
        ax.set_ylabel("cost per run (USD)")
        ax.set_title(f"Cost per run by {arm_word}", loc="left", fontsize=11)
    else:
        ax.set_ylabel("total tokens per run (no run reported a cost)")
        ax.set_title(f"Tokens per run by {arm_word} (no cost recorded)", loc="left", fontsize=11)
    ax.set_ylim(bottom=0)
    return _save(fig, path)


def _finite(c: Effect) -> bool:
    return all(isinstance(v, int | float) and math.isfinite(v) for v in (c.effect, c.ci_low, c.ci_high))


# Ratio ticks a reader can say out loud ("half", "twice"), instead of log-axis powers of ten.
_RATIO_TICKS = (0.05, 0.1, 0.2, 0.25, 0.33, 0.5, 0.67, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0)


def _ratio_axis(ax: Any, low: float, high: float) -> None:
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    # Symmetric around 1 on the log scale, so halving and doubling look the same size.
    span = max(abs(math.log(low)), abs(math.log(high)), math.log(1.25)) * 1.15
    ax.set_xlim(math.exp(-span), math.exp(span))
    # Start from 1 and keep a tick only if it is far enough from every kept one: no overlapping labels.
    gap = 2 * span / 9
    ticks = [1.0]
    for t in sorted(_RATIO_TICKS, key=lambda t: abs(math.log(t))):
        if abs(math.log(t)) <= span and all(abs(math.log(t / k)) >= gap for k in ticks):
            ticks.append(t)
    ticks.sort()
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))


def effects_forest(comparisons: list[Effect], path: Path, labels: dict[str, str] | None = None) -> Path:
    """Forest plot of every comparison: the effect and its 95% CI, one row each.

    Differences (success and a fractional score, in percentage points) and ratios (x-fold, log
    axis) get their own panel, stacked, with the no-effect line at 0 and at 1. Filled markers:
    Holm-adjusted p < 0.05. `labels` maps metric names to the words shown on the axis.
    """
    labels = labels or {}
    kinds = [k for k in ("difference", "ratio") if any(c.effect_kind == k for c in comparisons)]
    if not kinds:
        kinds = ["difference"]
    rows = {k: [c for c in comparisons if c.effect_kind == k] for k in kinds}
    heights = [max(len(rows[k]), 1) for k in kinds]
    fig = _new_figure(8.5, 0.5 * sum(heights) + 1.5 * len(kinds) + 0.6)
    axes = fig.subplots(len(kinds), 1, squeeze=False, gridspec_kw={"height_ratios": heights})[:, 0]
    for ax, kind in zip(axes, kinds, strict=True):
        _style_axes(ax)
        items = rows[kind]
        scale = 100.0 if kind == "difference" else 1.0
        ys = list(range(len(items)))[::-1]
        names = []
        bounds: list[float] = []
        for y, c in zip(ys, items, strict=True):
            names.append(f"{labels.get(c.metric, c.metric)}\n{c.b} vs {c.a}")
            if not _finite(c):
                ax.text(
                    0.5, y, "not estimable", transform=ax.get_yaxis_transform(), ha="center", color="#888888"
                )
                continue
            bounds += [c.ci_low * scale, c.ci_high * scale]
            significant = c.p_adjusted is not None and math.isfinite(c.p_adjusted) and c.p_adjusted < 0.05
            ax.plot([c.ci_low * scale, c.ci_high * scale], [y, y], color="#333333", linewidth=1.6)
            ax.plot(
                [c.effect * scale],
                [y],
                marker="D",
                markersize=7,
                color="#1f77b4",
                markerfacecolor="#1f77b4" if significant else "white",
                markeredgewidth=1.5,
            )
            adjusted = c.p_adjusted
            p_text = "n/a" if adjusted is None or not math.isfinite(adjusted) else f"{adjusted:.3g}"
            ax.annotate(
                f"Holm p = {p_text}",
                (1.0, y),
                xycoords=("axes fraction", "data"),
                xytext=(6, 0),
                textcoords="offset points",
                va="center",
                fontsize=8,
                color="#444444",
            )
        if kind == "difference":
            ax.axvline(0, color="#999999", linestyle="--", linewidth=1)
            # Always show the no-effect line, and never beyond the possible -100..+100 pp.
            reach = max([abs(b) for b in bounds] + [10.0]) * 1.1
            ax.set_xlim(max(-105.0, -reach), min(105.0, reach))
            # A fractional score in [0, 1] is a mean difference on the same scale as a rate.
            scored = any(c.metric != "success" for c in items)
            what = "success rate or mean score" if scored else "success rate"
            ax.set_xlabel(f"difference in {what}, B − A (percentage points), 95% CI")
            ax.set_title(
                "Success and score: difference" if scored else "Success: difference", loc="left", fontsize=10
            )
        else:
            ax.set_xscale("log")
            ax.axvline(1, color="#999999", linestyle="--", linewidth=1)
            positive = [b for b in bounds if b > 0]
            _ratio_axis(ax, min(positive, default=0.8), max(positive, default=1.25))
            ax.set_xlabel("ratio of medians, B / A (x-fold, log scale), 95% CI")
            ax.set_title("Cost, tokens, tool calls, time: ratio", loc="left", fontsize=10)
        ax.set_yticks(ys, names, fontsize=8)
        ax.set_ylim(-0.6, max(len(items), 1) - 0.4)
        ax.grid(axis="x", color="#e5e5e5")
    fig.suptitle(
        "Effects, B vs A, with 95% CIs (filled: Holm-adjusted p < 0.05)", x=0.01, ha="left", fontsize=11
    )
    return _save(fig, path)
