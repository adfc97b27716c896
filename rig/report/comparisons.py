"""The report's comparisons: every arm against the reference with its CI and Holm-adjusted p, the
per-task Fisher tests, and the verdict of an experiment's sequential stopping rule."""

import math
from collections import Counter
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from rig.analysis import POPULATION, SCORE, THESE_TASKS, Comparison, compare_conditions, newcombe_interval
from rig.report.document import (
    DASH,
    Block,
    Heading,
    Para,
    Table,
    fmt_count,
    fmt_p,
    fmt_pct,
    is_missing,
    plural,
)
from rig.report.failures import code
from rig.report.sources import Source
from rig.store.results import ResultsStore

if TYPE_CHECKING:
    import pandas as pd

# The comparisons report.json lists: those whose effect is a difference of fractions.
JSON_METRICS = ("success", SCORE)
METRIC_LABELS = {
    "success": "success rate",
    "score": "mean score",
    "cost_usd": "cost (USD)",
    "total_tokens": "total tokens",
    "tool_calls": "tool calls",
    "wall_s": "wall time",
}


def fmt_effect(c: Comparison) -> tuple[str, str]:
    """(effect, 95% CI) as text: success differences in percentage points, ratios as x-fold."""
    if is_missing(c.effect):
        return DASH, DASH
    if c.effect_kind == "difference":
        ci = (
            DASH
            if is_missing(c.ci_low) or is_missing(c.ci_high)
            else f"[{c.ci_low * 100:+.1f}, {c.ci_high * 100:+.1f}] pp"
        )
        return f"{c.effect * 100:+.1f} pp", ci
    ci = DASH if is_missing(c.ci_low) or is_missing(c.ci_high) else f"[{c.ci_low:.2f}×, {c.ci_high:.2f}×]"
    return f"{c.effect:.2f}×", ci


# The one sentence a report says of the question its success and score comparisons answer.
QUESTIONS = {
    POPULATION: (
        "This experiment asks about **tasks like these** (estimand `population`): each success and "
        "score difference has its task-clustered 95% CI (t with tasks − 1 degrees of freedom) and the "
        "Wald t-test of that same difference with the same standard error, so p < 0.05 exactly when "
        "the CI leaves out 0; it widens with few tasks, as a claim about other tasks must."
    ),
    THESE_TASKS: (
        "This experiment asks about **exactly the tasks run** (estimand `these_tasks`): each success "
        "difference has the exact conditional test stratified by task and Newcombe's 95% CI of these "
        "tasks' pooled difference, a score difference the z-test and CI of its run-to-run noise; only "
        "run-to-run noise is uncertain, and nothing is claimed about other tasks."
    ),
}


def comparison_blocks(
    comparisons: list[Comparison],
    arms: list[str],
    vs: bool,
    estimand: str = POPULATION,
    by_group: dict[str, list[Comparison]] | None = None,
) -> list[Block]:
    """Section 3: the question the comparisons answer, every comparison against the reference arm
    `arms[0]`, each group's own comparisons (`by_group`, when runs have groups), then the per-task
    Fisher tests."""
    blocks: list[Block] = [Heading(2, "3. Comparisons")]
    if not comparisons:
        blocks.append(
            Para(f"Only one arm ({', '.join(code(a) for a in arms) or 'none'}): nothing to compare.")
        )
        return blocks
    what = "experiment" if vs else "condition"
    blocks.append(Para(QUESTIONS[estimand]))
    blocks.append(
        Para(
            f"Each row compares {what} B with the reference A ({code(arms[0])}). Success: difference in "
            "success rate, B − A, in percentage points; "
            + (
                "mean score (partial credit in [0, 1] per run): difference of means, B − A, in points "
                "of 100; "
                if any(c.metric == "score" for c in comparisons)
                else ""
            )
            + "cost, tokens, tool calls and wall time: ratio of B to A (x-fold), with a task-clustered "
            "CI and a Wilcoxon test on per-task medians (about tasks like these, whatever the "
            "estimand). p-values are Holm-adjusted across all rows that have one (a metric with no "
            "data has no effect and no p-value, and is left out of the adjustment)."
            + (
                " The runs carry groups (a further stratum, such as a harness-model configuration): "
                "the rows above pool them, stratified by task x group and clustered by task; each "
                "group's own comparisons follow, each group a Holm family of its own."
                if by_group
                else ""
            )
        )
    )
    blocks.append(_comparison_table(comparisons))
    for group, group_comparisons in (by_group or {}).items():
        blocks.append(Heading(3, f"Group {code(group)}"))
        blocks.append(_comparison_table(group_comparisons))
    for c in comparisons:
        if c.metric != "success" or not c.per_task:
            continue
        blocks.append(Heading(3, f"Per-task success: {code(c.b)} vs {code(c.a)} (Fisher exact)"))
        task_rows = []
        for t in c.per_task:
            ka, na, kb, nb = (int(t[k]) for k in ("successes_a", "n_a", "successes_b", "n_b"))
            diff, lo, hi = newcombe_interval(ka, na, kb, nb)
            task_rows.append(
                [
                    code(t["task"]),
                    f"{ka}/{na} ({fmt_pct(ka / na if na else math.nan, 0)})",
                    f"{kb}/{nb} ({fmt_pct(kb / nb if nb else math.nan, 0)})",
                    DASH if is_missing(diff) else f"{diff * 100:+.1f} pp",
                    DASH if is_missing(lo) else f"[{lo * 100:+.1f}, {hi * 100:+.1f}] pp",
                    fmt_p(t.get("fisher_p")),
                ]
            )
        blocks.append(
            Table(
                ["task", f"A {c.a}", f"B {c.b}", "B − A", "95% CI (Newcombe)", "Fisher p (raw)"],
                task_rows,
                frozenset({1, 2, 3, 4, 5}),
            )
        )
    blocks.append(
        Para(
            "Per-task Fisher p-values are unadjusted and, with few repetitions per task, have little "
            "power; read them as a guide to where the pooled effect comes from."
        )
    )
    return blocks


def all_comparisons(
    df: "pd.DataFrame", arms: list[str]
) -> tuple[list[Comparison], dict[str, list[Comparison]]]:
    """Every arm against `arms[0]` on every metric, in the question the data declares
    (`df.attrs["estimand"]`), and, when runs carry a `group` (a further stratum, e.g. a harness-model
    configuration), each group's own comparisons. The pooled ones are stratified by task x group and
    clustered by task: like is compared with like, and each task still counts once. A group without
    the reference, or with one arm only, has no comparisons."""
    if "group" not in df.columns or not df["group"].notna().any():
        return compare_conditions(df, reference=arms[0], conditions=arms), {}
    df = df.assign(group=df["group"].fillna(""))
    pooled = compare_conditions(
        df, reference=arms[0], conditions=arms, strata=["task", "group"], cluster="task"
    )
    by_group = {}
    for group in sorted(df["group"].unique()):
        rows = df[(df["group"] == group).to_numpy()]
        present = [arm for arm in arms if arm in set(rows["condition"])]
        if len(present) >= 2 and present[0] == arms[0]:
            by_group[str(group)] = compare_conditions(rows, reference=arms[0], conditions=present)
    return pooled, by_group


def comparisons_json(
    comparisons: list[Comparison], by_group: dict[str, list[Comparison]], estimand: str
) -> dict[str, Any]:
    """report.json: every success and score comparison for scripts, effects as fractions (other −
    reference), NaN as null, `group` "" for the pooled ones, `n` the runs compared (both arms)."""

    def number(value: float | None) -> float | None:
        return None if value is None or math.isnan(value) else float(value)

    rows = [
        {
            "metric": c.metric,
            "group": group,
            "estimand": c.estimand,
            "reference": c.a,
            "other": c.b,
            "effect": number(c.effect),
            "ci_low": number(c.ci_low),
            "ci_high": number(c.ci_high),
            "p": number(c.p_value),
            "p_holm": number(c.p_adjusted),
            "n": c.n_a + c.n_b,
        }
        for group, family in [("", comparisons), *by_group.items()]
        for c in family
        if c.metric in JSON_METRICS
    ]
    return {"estimand": estimand, "comparisons": rows}


def _comparison_table(comparisons: list[Comparison]) -> Table:
    """One row per comparison: effect, CI, test, raw and Holm-adjusted p, tasks and runs, note."""
    rows = []
    for c in comparisons:
        effect, ci = fmt_effect(c)
        # A p-value is never shown without the effect it tests (e.g. no costs at all: p = 1 by fiat).
        shown = effect != DASH
        rows.append(
            [
                METRIC_LABELS.get(c.metric, c.metric),
                f"{code(c.b)} vs {code(c.a)}",
                effect,
                ci,
                c.test,
                fmt_p(c.p_value) if shown else DASH,
                fmt_p(c.p_adjusted) if shown else DASH,
                fmt_count(c.n_tasks),
                f"{c.n_a} / {c.n_b}",
                c.note or "",
            ]
        )
    headers = ["metric", "B vs A", "effect", "95% CI", "test", "p", "p (Holm)", "tasks", "runs A / B", "note"]
    return Table(headers, rows, frozenset({2, 3, 5, 6, 7, 8}))


def sequential_blocks(source: Source) -> list[Block]:
    """The `[stopping]` rule's verdict for one experiment, re-derived from its records."""
    from rig.analysis.sequential import EFFECT, SPENDING, sequential_result
    from rig.experiment.plan import plan
    from rig.packs.tasks import TaskError, load_tasks
    from rig.schema import Experiment
    from rig.store.migrate import read_quarantine

    if not source.design.get("stopping"):
        return []
    name = code(source.name)
    try:
        experiment = Experiment.model_validate(source.design)
    except ValidationError as exc:
        return [
            Heading(3, f"Sequential stopping of {name}"),
            Para(f"Its design cannot be read by this rig ({exc.error_count()} errors): no verdict."),
        ]
    stopping = experiment.stopping
    assert stopping is not None  # the design has [stopping]
    a, b = stopping.compare
    blocks: list[Block] = [Heading(3, f"Sequential stopping of {name}: {code(b)} vs {code(a)}")]
    try:
        tasks = load_tasks(source.pack, None if experiment.tasks == "all" else list(experiment.tasks))
    except TaskError as exc:
        return [*blocks, Para(f"The plan cannot be rebuilt ({exc}): no sequential verdict.")]
    run_ids, successes = (source.table.column(c).to_pylist() for c in ("run_id", "success"))
    outcomes = dict(zip(run_ids, successes, strict=True))
    quarantined = Counter(str(r["run_id"]) for r in read_quarantine(ResultsStore(source.folder)))
    exhausted = {run for run, n in quarantined.items() if n >= experiment.max_attempts}
    result = sequential_result(stopping, plan(experiment, [t.id for t in tasks]), outcomes, exhausted)
    min_pp = f"{stopping.min_effect * 100:.0f}"
    blocks.append(
        Para(
            f"A look after every round of repetitions (every condition of every task once), up to "
            f"{result.rounds}, with type I error at most {stopping.alpha:g} however many looks are taken. "
            "The test pairs run r of A with run r of B of the same task: with no difference, a discordant "
            "pair (one succeeded, one failed) favours either arm with probability 1/2, so an exact "
            f"group-sequential test on the pairs ({SPENDING} alpha spending) finds an effect when "
            "|wins - losses| reaches the look's boundary; it concludes no effect of at least "
            f"{min_pp} points when both one-sided E values against such an effect reach "
            f"{1 / stopping.alpha:.3g} (docs/stopping.md)."
        )
    )
    verdict = f"**{result.verdict}**"
    if result.verdict == EFFECT:
        verdict += f" ({code(result.direction)} succeeds more often)"
    if result.stopped_at is None:
        where = f"not decided after {len(result.looks)} of {result.rounds} looks" + (
            f"; the next look waits for {plural(len(result.pending), 'run')}" if result.pending else ""
        )
    else:
        where = f"stopped at look {result.stopped_at} of {result.rounds}: {result.reason}"
    share = result.runs_saved / result.runs_planned if result.runs_planned else math.nan
    blocks.append(
        Para(
            f"Sequential verdict: {verdict}; {where}. Runs: {result.runs_recorded} recorded of the fixed "
            f"design's {result.runs_planned}, **{result.runs_saved} saved** ({fmt_pct(share, 0)})."
        )
    )
    rows = [
        [
            str(look.repetition),
            str(look.pairs),
            f"{look.wins} / {look.losses}",
            str(abs(look.wins - look.losses)),
            DASH if math.isinf(look.boundary) else f"{look.boundary:g}",
            f"{look.alpha_spent:.2g}",
            f"{look.e_no_effect:.3g}",
            look.verdict,
        ]
        for look in result.looks
    ]
    if rows:
        headers = [
            "look (round)",
            "pairs",
            f"discordant for {b} / {a}",
            "|wins - losses|",
            "boundary",
            "alpha spent",
            f"E against >= {min_pp} pp",
            "verdict",
        ]
        blocks.append(Table(headers, rows, frozenset({0, 1, 2, 3, 4, 5, 6})))
    return blocks
