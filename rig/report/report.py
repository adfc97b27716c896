"""`rig report`: the design, the pins, per-cell rates, comparisons with CIs, behaviour, figures.

One or more results folders (one per experiment) become:

- `report.md` (or one self-contained `report.html`): the design and pins, the per-cell table with
  the infrastructure reruns under it, every comparison as an effect with its 95% CI next to its raw
  and Holm-adjusted p, per-task Fisher tests, a behaviour table and the figures;
- `failures.md`: every failed scored run, grouped by failing stage and failed hidden tests, with
  relative links to its receipts, the work queue for reading transcripts;
- `figures/*.png`;
- with format `json`, `report.json` alone: every success and score comparison (pooled and per
  group), its estimand, effect, CI, p and Holm p, for scripts (rig.report.comparisons.comparisons_json),
  and `unsealed_runs` when a run was not sealed (rig.report.sealing).

Runs whose agent ran without the sandbox (it could read the hidden tests and the answers) are
counted near the top of report.md, per arm; nothing is said when every run was sealed.

The report body is built once as a list of blocks and rendered to Markdown or HTML, so both
formats always hold the same content. Nothing time-dependent is written: given the results and the
seed, the output is byte-for-byte the same.

This module reads the runs and assembles the report; its sections are made in rig.report.tables
(design and pins, cells, models, behaviour) and rig.report.comparisons, as the blocks of
rig.report.document.
"""

import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from rig.analysis import Comparison, cell_table, infra_summary, load_runs
from rig.report import figures
from rig.report.background import Worker
from rig.report.comparisons import (
    METRIC_LABELS,
    all_comparisons,
    comparison_blocks,
    comparisons_json,
    sequential_blocks,
)
from rig.report.document import Block, Heading, Image, Para, render_html, render_markdown
from rig.report.failures import COLUMNS as FAILURE_COLUMNS
from rig.report.failures import rel, write_failures
from rig.report.links import RUNS_PAGE, existing_view
from rig.report.noise import flakiness_blocks, noise_floor_blocks
from rig.report.sealing import counts as sealing_counts
from rig.report.sealing import unsealed_json, unsealed_text
from rig.report.sources import read_source, success_text
from rig.report.tables import behaviour_blocks, cell_blocks, design_blocks, hang_text, model_blocks
from rig.schema import Pack
from rig.store import runs_cache
from rig.verify.checks import GATE_STAGE

# What `rig report --format` writes: report.md, one self-contained report.html, or report.json alone.
FORMATS = ("md", "html", "json")
# The verdicts after the gate, in the order a reader fixes them: the hidden tests, then verification.
AFTER_GATE = ("hidden", "verify")
FIGURE_FILES = {
    "success_by_task": "figures/success_by_task.png",
    "cost_distribution": "figures/cost_distribution.png",
    "effects_forest": "figures/effects_forest.png",
}


def stage_order(packs: list[Pack | None]) -> list[str]:
    """Failing stages in the order a reader fixes them: each pack's gate stages, then the verdicts
    after the gate. A gate that reports by exit code alone has the one stage `gate`; imported
    results (no pack) add none."""
    order: list[str] = []
    for pack in packs:
        if pack is None:
            continue
        gate = pack.spec.gate
        stages = gate.stages if gate.report == "json" else [GATE_STAGE]
        order += [stage for stage in stages if stage not in order]
    return order + [stage for stage in AFTER_GATE if stage not in order]


# -- figures ----------------------------------------------------------------------------------


def _draw_figures(
    worker: Worker,
    df: pd.DataFrame,
    cells: pd.DataFrame,
    comparisons: list[Comparison],
    arms: list[str],
    tasks: list[str],
    out_dir: Path,
    seed: int,
    arm_word: str,
) -> tuple[list[Callable[[], Path]], bool]:
    """Start drawing the three figures in `worker`; returns what waits for each figure's path,
    and whether the distribution shows cost."""
    rows = cells.to_dict("records")
    target = out_dir / FIGURE_FILES["success_by_task"]
    drawn = [worker.run(figures.success_by_task, rows, arms, tasks, target, arm_word)]
    # Cost when any run reported one; a harness without cost reporting still has token counts.
    has_cost = bool(df["cost_usd"].notna().any()) if not df.empty else False
    metric = "cost_usd" if has_cost else "total_tokens"
    values = {arm: [float(v) for v in df.loc[df["condition"] == arm, metric].dropna()] for arm in arms}
    target = out_dir / FIGURE_FILES["cost_distribution"]
    drawn.append(
        worker.run(
            figures.cost_distribution, values, arms, target, cost=has_cost, seed=seed, arm_word=arm_word
        )
    )
    effects = [figures.Effect(*(getattr(c, f) for f in figures.Effect._fields)) for c in comparisons]
    drawn.append(
        worker.run(figures.effects_forest, effects, out_dir / FIGURE_FILES["effects_forest"], METRIC_LABELS)
    )
    return drawn, has_cost


# -- entry point ------------------------------------------------------------------------------


def build_report(
    folders: list[Path],
    out_dir: Path,
    vs: bool = False,
    fmt: str = "md",
    allow_mixed_pins: bool = False,
    seed: int = 0,
    view_dir: Path | None = None,
) -> list[Path]:
    """Write the report of the results folders into `out_dir`; return the written paths.

    With `vs`, each folder's experiment is one arm and the experiments are compared with each other;
    otherwise the conditions are. Raises `rig.analysis.PoolingError` (before writing anything) when
    records with different pins would be pooled and `allow_mixed_pins` is false. Failures link to the
    pages of the `rig view` folder `view_dir` (default: the folders' own view, if one was written).
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; use {', '.join(FORMATS)}")
    folders = [Path(f).resolve() for f in folders]
    out_dir = Path(out_dir).resolve()
    if fmt == "json":
        return [_write_json(folders, out_dir, vs, allow_mixed_pins)]
    # The figures and failures.md are made in a worker process, which imports matplotlib while the
    # runs are read.
    with Worker(figures.warm_up) as worker:
        return _build(worker, folders, out_dir, vs, fmt, allow_mixed_pins, seed, view_dir)


def _write_json(folders: list[Path], out_dir: Path, vs: bool, allow_mixed_pins: bool) -> Path:
    """report.json: the comparisons of the report, for scripts (`comparisons_json`), and the runs
    that were not sealed (`unsealed_runs`), when there are any."""
    df = load_runs(folders, allow_mixed_pins=allow_mixed_pins, arm_by_experiment=vs, paths=False)
    arms = list(df.attrs["conditions"])
    pooled, by_group = all_comparisons(df, arms) if len(arms) >= 2 else ([], {})
    body = comparisons_json(pooled, by_group, df.attrs["estimand"])
    unsealed = unsealed_json(*sealing_counts(df, arms))
    if unsealed is not None:
        body["unsealed_runs"] = unsealed
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / "report.json"
    # Written whole, then renamed: a reader never sees half a file.
    partial = target.with_name(".report.json.partial")
    partial.write_text(json.dumps(body, indent=2, allow_nan=False) + "\n")
    partial.replace(target)
    return target


def _build(
    worker: Worker,
    folders: list[Path],
    out_dir: Path,
    vs: bool,
    fmt: str,
    allow_mixed_pins: bool,
    seed: int,
    view_dir: Path | None,
) -> list[Path]:
    df = load_runs(folders, allow_mixed_pins=allow_mixed_pins, arm_by_experiment=vs, paths=False)
    infra = infra_summary(folders)
    sources = [read_source(f) for f in folders]

    # The arms in the designs' declared order (load_runs), the reference first: never row order.
    arms = list(df.attrs["conditions"])
    tasks = sorted(str(t) for t in df["task"].unique()) if not df.empty else []
    cells = cell_table(df) if not df.empty else pd.DataFrame(columns=["task", "condition", "n"])
    comparisons, by_group = all_comparisons(df, arms) if len(arms) >= 2 else ([], {})

    out_dir.mkdir(parents=True, exist_ok=True)
    arm_word = "experiment" if vs else "condition"
    drawing, has_cost = _draw_figures(worker, df, cells, comparisons, arms, tasks, out_dir, seed, arm_word)
    # What failures.md reads of the failed runs, keyed as load_runs spells `artifacts`.
    records = {path: r for s in sources for path, r in runs_cache.failure_details(s.folder, s.table).items()}
    failed = df[~df["success"].astype(bool)]
    packs = [s.pack for s in sources]
    view = Path(view_dir).resolve() if view_dir is not None else existing_view(folders)
    writing = worker.run(
        write_failures,
        {c: failed[c].tolist() for c in FAILURE_COLUMNS},
        len(df),
        records,
        out_dir,
        several_experiments=len(sources) > 1,
        stages=stage_order(packs),
        view=view,
    )
    # The HTML report sends a reader to the viewer's run table, filtered to the failures, when there is one.
    failures_link = (
        f"[the viewer]({rel(view / RUNS_PAGE, out_dir)}#outcome=failure) (and [failures.md](failures.md))"
        if view is not None and fmt == "html"
        else "[failures.md](failures.md)"
    )

    names = [s.name for s in sources]
    title = "rig report: " + (" vs ".join(names) if vs else ", ".join(names))
    n_failed = int((~df["success"].astype(bool)).sum()) if not df.empty else 0
    blocks: list[Block] = [
        Heading(1, title),
        Para(
            f"{len(df)} scored runs in {len(tasks)} tasks x {len(arms)} "
            f"{'experiments' if vs else 'conditions'}; {n_failed} failed, listed by failing stage in "
            f"{failures_link} with links to each run's receipts. " + success_text(sources)
        ),
    ]
    # Runs whose agent could read the answers are said before anything is read of their results.
    unsealed = unsealed_text(*sealing_counts(df, arms), arm_word)
    if unsealed is not None:
        blocks.append(Para(unsealed))
    blocks += design_blocks(sources, tasks)
    blocks += cell_blocks(cells, infra, arms, tasks, arm_word)
    blocks.append(Para(hang_text(df, arms, arm_word)))
    blocks += model_blocks(df, arms, arm_word)
    blocks += flakiness_blocks(df, arms, arm_word)
    blocks += comparison_blocks(comparisons, arms, vs, df.attrs["estimand"], by_group)
    for source in sources:
        blocks += sequential_blocks(source)
    blocks += noise_floor_blocks(sources, comparisons)
    blocks += behaviour_blocks(df, arms, arm_word)
    distribution = "Cost per run" if has_cost else "Total tokens per run (no run reported a cost)"
    captions = [
        figures.success_caption(len(tasks), arm_word),
        f"{distribution} per {arm_word}: box (quartiles, median) and every run.",
        "Every comparison: effect with its 95% CI; dashed line: no effect.",
    ]
    blocks.append(Heading(2, "5. Figures"))
    figure_paths = [drawn() for drawn in drawing]
    failures = writing()
    for path, caption in zip(figure_paths, captions, strict=True):
        blocks.append(Image(path, rel(path, out_dir), caption))

    if fmt == "html":
        report = out_dir / "report.html"
        report.write_text(render_html(blocks, title))
    else:
        report = out_dir / "report.md"
        report.write_text(render_markdown(blocks))
    return [report, failures, *figure_paths]
