"""`rig report`: the design, the pins, per-cell rates, comparisons with CIs, behaviour, figures.

One or more results folders (one per experiment) become:

- `report.md` (or one self-contained `report.html`): the design and pins, the per-cell table with
  the infrastructure reruns under it, every comparison as an effect with its 95% CI next to its raw
  and Holm-adjusted p, per-task Fisher tests, a behaviour table and the figures;
- `failures.md`: every failed scored run, grouped by failing stage and failed hidden tests, with
  relative links to its receipts, the work queue for reading transcripts;
- `figures/*.png`.

The report body is built once as a list of blocks and rendered to Markdown or HTML, so both
formats always hold the same content. Nothing time-dependent is written: given the results and the
seed, the output is byte-for-byte the same.
"""

import base64
import html
import json
import math
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
from pydantic import ValidationError

from rig.analysis import (
    Comparison,
    cell_table,
    compare_conditions,
    infra_summary,
    load_runs,
    newcombe_interval,
)
from rig.experiment.estimate import spent
from rig.packs.manifest import PackError, load_pack
from rig.report import figures
from rig.report.background import Worker
from rig.report.failures import COLUMNS as FAILURE_COLUMNS
from rig.report.failures import code, rel, write_failures
from rig.report.links import RUNS_PAGE, existing_view
from rig.report.markdown_html import inline_html
from rig.schema import Pack
from rig.store import runs_cache
from rig.store.migrate import DuplicateRunWarning
from rig.store.results import ResultsStore
from rig.verify.checks import GATE_STAGE

if TYPE_CHECKING:
    import pyarrow as pa

# The verdicts after the gate, in the order a reader fixes them: the hidden tests, then verification.
AFTER_GATE = ("hidden", "verify")
# What the pins of a record older than packs say about its pack.
BEFORE_PACKS = "(before packs)"
FIGURE_FILES = {
    "success_by_task": "figures/success_by_task.png",
    "cost_distribution": "figures/cost_distribution.png",
    "effects_forest": "figures/effects_forest.png",
}
METRIC_LABELS = {
    "success": "success rate",
    "cost_usd": "cost (USD)",
    "total_tokens": "total tokens",
    "tool_calls": "tool calls",
    "wall_s": "wall time",
}
DASH = "—"


# -- document blocks ----------------------------------------------------------------------------
#
# Inline text uses a tiny Markdown subset that both renderers understand: `code`, **bold** and
# [text](relative link).


@dataclass(frozen=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True)
class Para:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: list[str]


@dataclass(frozen=True)
class Table:
    headers: list[str]
    rows: list[list[str]]
    # Columns (by index) aligned right: the numeric ones.
    right: frozenset[int] = field(default_factory=frozenset)


@dataclass(frozen=True)
class Image:
    path: Path
    rel: str
    caption: str


Block = Heading | Para | Bullets | Table | Image


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(blocks: list[Block]) -> str:
    """The blocks as GitHub-flavoured Markdown; images are linked by their relative path."""
    out: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            out.append("#" * block.level + " " + block.text)
        elif isinstance(block, Para):
            out.append(block.text)
        elif isinstance(block, Bullets):
            out.append("\n".join(f"- {item}" for item in block.items))
        elif isinstance(block, Table):
            aligns = ["---:" if i in block.right else ":---" for i in range(len(block.headers))]
            lines = [
                "| " + " | ".join(_md_cell(h) for h in block.headers) + " |",
                "| " + " | ".join(aligns) + " |",
            ]
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in block.rows]
            out.append("\n".join(lines))
        else:
            out.append(f"![{block.caption}]({block.rel})\n\n*{block.caption}*")
    return "\n\n".join(out) + "\n"


_CSS = """
body { font: 15px/1.5 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #1f2328;
       max-width: 1180px; margin: 2em auto; padding: 0 1.5em; }
h1 { border-bottom: 2px solid #d0d7de; padding-bottom: .3em; }
h2 { border-bottom: 1px solid #d0d7de; padding-bottom: .2em; margin-top: 2em; }
table { border-collapse: collapse; margin: .8em 0 1.2em; font-size: 13px; }
th, td { border: 1px solid #d0d7de; padding: 4px 9px; vertical-align: top; }
th { background: #f6f8fa; text-align: left; }
td.r, th.r { text-align: right; font-variant-numeric: tabular-nums; }
tr:nth-child(even) td { background: #fbfbfc; }
code { font: 12px/1.4 ui-monospace, Menlo, Consolas, monospace; background: #f3f4f6;
       padding: 1px 4px; border-radius: 4px; }
figure { margin: 1.2em 0; }
figure img { max-width: 100%; border: 1px solid #eaeef2; }
figcaption { color: #57606a; font-size: 13px; }
"""


def render_html(blocks: list[Block], title: str) -> str:
    """The blocks as one self-contained HTML page: inline CSS, figures as base64 PNG data URIs."""
    body: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            body.append(f"<h{block.level}>{inline_html(block.text)}</h{block.level}>")
        elif isinstance(block, Para):
            body.append(f"<p>{inline_html(block.text)}</p>")
        elif isinstance(block, Bullets):
            items = "".join(f"<li>{inline_html(item)}</li>" for item in block.items)
            body.append(f"<ul>{items}</ul>")
        elif isinstance(block, Table):

            def cell(tag: str, i: int, text: str, right: frozenset[int] = block.right) -> str:
                cls = ' class="r"' if i in right else ""
                return f"<{tag}{cls}>{inline_html(text)}</{tag}>"

            head = "".join(cell("th", i, h) for i, h in enumerate(block.headers))
            rows = "".join(
                "<tr>" + "".join(cell("td", i, c) for i, c in enumerate(row)) + "</tr>" for row in block.rows
            )
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        else:
            data = base64.b64encode(block.path.read_bytes()).decode("ascii")
            caption = inline_html(block.caption)
            body.append(
                f'<figure><img alt="{html.escape(block.caption)}" src="data:image/png;base64,{data}">'
                f"<figcaption>{caption}</figcaption></figure>"
            )
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )


# -- number formats ---------------------------------------------------------------------------


def _missing(value: object) -> bool:
    if value is None:
        return True
    try:
        return math.isnan(float(value))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return True


def fmt_pct(value: object, digits: int = 1) -> str:
    """A share in [0, 1] as a percentage, e.g. 0.6667 -> "66.7%"."""
    return DASH if _missing(value) else f"{float(value) * 100:.{digits}f}%"  # type: ignore[arg-type]


def fmt_ci_pct(low: object, high: object) -> str:
    """A CI of a share as "[40.0%, 85.1%]"."""
    if _missing(low) or _missing(high):
        return DASH
    return f"[{fmt_pct(low)}, {fmt_pct(high)}]"


def fmt_p(value: object) -> str:
    """A p-value with 3 significant digits."""
    return DASH if _missing(value) else f"{float(value):.3g}"  # type: ignore[arg-type]


def fmt_usd(value: object) -> str:
    """Dollars with 4 decimals (one run costs cents or less)."""
    return DASH if _missing(value) else f"${float(value):.4f}"  # type: ignore[arg-type]


def fmt_count(value: object) -> str:
    """A count or median count: thousands separators, decimals only when there are any."""
    if _missing(value):
        return DASH
    number = float(value)  # type: ignore[arg-type]
    return f"{number:,.0f}" if number.is_integer() else f"{number:,.1f}"


def fmt_seconds(value: object) -> str:
    """Seconds with one decimal."""
    return DASH if _missing(value) else f"{float(value):.1f} s"  # type: ignore[arg-type]


def fmt_effect(c: Comparison) -> tuple[str, str]:
    """(effect, 95% CI) as text: success differences in percentage points, ratios as x-fold."""
    if _missing(c.effect):
        return DASH, DASH
    if c.effect_kind == "difference":
        ci = (
            DASH
            if _missing(c.ci_low) or _missing(c.ci_high)
            else f"[{c.ci_low * 100:+.1f}, {c.ci_high * 100:+.1f}] pp"
        )
        return f"{c.effect * 100:+.1f} pp", ci
    ci = DASH if _missing(c.ci_low) or _missing(c.ci_high) else f"[{c.ci_low:.2f}×, {c.ci_high:.2f}×]"
    return f"{c.effect:.2f}×", ci


def _short(digest: str) -> str:
    return digest[:12]


# -- inputs -----------------------------------------------------------------------------------


@dataclass
class _Source:
    """One results folder: its design (experiment.json), the pack it names and its scored records,
    as the columns of `runs_cache.report_table` (records are made only of the runs that need one)."""

    folder: Path
    design: dict[str, Any]
    digest: str | None
    table: "pa.Table"
    pack: Pack

    @property
    def name(self) -> str:
        if self.design.get("name"):
            return str(self.design["name"])
        names = sorted(str(n) for n in self.distinct("experiment"))
        return names[0] if names else self.folder.name

    def distinct(self, column: str) -> list[Any]:
        """The distinct values of one of the records' columns."""
        return self.table.column(column).unique().to_pylist()


def _read_source(folder: Path) -> _Source:
    design_path = folder / "experiment.json"
    design: dict[str, Any] = {}
    digest = None
    if design_path.is_file():
        raw = json.loads(design_path.read_text())
        design = raw.get("experiment", raw)
        digest = raw.get("digest")
    # The same records load_runs read and reported on: migrated, first of each run id, holding the
    # fields this report reads (runs_cache.REPORT_COLUMNS).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DuplicateRunWarning)
        table = runs_cache.report_table(ResultsStore(folder))
    # A design without `pack` (or none at all) ran on the built-in pack, as Experiment's default says.
    # The pack is read for its gate (the stage order and the success definition), so it must exist.
    try:
        pack = load_pack(design.get("pack"))
    except PackError as exc:
        raise PackError(
            f"{design_path} names pack {design.get('pack')!r}, which cannot be read: {exc}"
        ) from None
    return _Source(folder, design, digest, table, pack)


def _gate_text(pack: Pack) -> str:
    """The gate as the pack's docs tell a person to run it."""
    return code(" ".join(pack.spec.gate.command))


def stage_order(packs: list[Pack]) -> list[str]:
    """Failing stages in the order a reader fixes them: each pack's gate stages, then the verdicts
    after the gate. A gate that reports by exit code alone has the one stage `gate`."""
    order: list[str] = []
    for pack in packs:
        gate = pack.spec.gate
        stages = gate.stages if gate.report == "json" else [GATE_STAGE]
        order += [stage for stage in stages if stage not in order]
    return order + [stage for stage in AFTER_GATE if stage not in order]


def _arm_order(df: pd.DataFrame, sources: list[_Source]) -> list[str]:
    """Arms in the order the designs declare them (experiment order, then condition order)."""
    if df.empty:
        return []
    experiments = {s.name: i for i, s in enumerate(sources)}
    declared = {
        (s.name, c.get("name")): j for s in sources for j, c in enumerate(s.design.get("conditions", []))
    }
    keys: dict[str, tuple[int, int, str]] = {}
    pairs = df[["experiment", "condition"]].drop_duplicates()
    for exp, arm in zip(pairs["experiment"].tolist(), pairs["condition"].tolist(), strict=True):
        key = (experiments.get(exp, len(experiments)), declared.get((exp, arm), 10_000), str(arm))
        keys[arm] = min(keys.get(arm, key), key)
    return sorted(keys, key=lambda a: keys[a])


# -- sections ---------------------------------------------------------------------------------


def _design_blocks(sources: list[_Source], tasks: list[str]) -> list[Block]:
    blocks: list[Block] = [Heading(2, "1. Design and pins")]
    for source in sources:
        d = source.design
        blocks.append(Heading(3, f"Experiment {code(source.name)}"))
        if not d:
            blocks.append(Para(f"No experiment.json in {code(source.folder.name)}; design unknown."))
        seen_tasks = sorted(str(t) for t in source.distinct("task"))
        declared = d.get("tasks", "all")
        task_text = (
            f"all ({', '.join(code(t) for t in seen_tasks)})"
            if declared == "all"
            else ", ".join(code(t) for t in declared)
        )
        provider = d.get("provider") or {}
        timeouts = d.get("timeouts") or {}
        items = [
            f"title: {d.get('title') or DASH}",
            f"harness: {code(d.get('harness', DASH))}, model: {_setting(d.get('model'))}, "
            f"thinking: {_setting(d.get('thinking'))}, provider: {code(provider.get('kind', DASH))}"
            + (f" ({code(provider['name'])})" if provider.get("name") else ""),
            f"tasks: {task_text}",
            f"repetitions: {d.get('repetitions', DASH)}, seed: {d.get('seed', DASH)}, "
            f"workers: {d.get('workers', DASH)}, max attempts per run: {d.get('max_attempts', DASH)}",
            "timeouts: "
            + (
                ", ".join(
                    f"{k.removesuffix('_s')} {_setting(v) if v is None else f'{float(v):g} s'}"
                    for k, v in sorted(timeouts.items())
                )
                or DASH
            ),
        ]
        # What the experiment cost, every attempt billed (its budget is not shown: raising it to
        # resume leaves the stored design as it was).
        cost, _, attempts = spent(ResultsStore(source.folder))
        items.append(f"spent: {fmt_usd(cost)} over {attempts} attempts, infrastructure failures included")
        if source.digest:
            items.append(f"design digest: {code(_short(source.digest))}")
        # The pack as the design names it, read now: the pins below say which pack the runs measured.
        pack = source.pack
        where = code(d["pack"]) if d.get("pack") else "built-in"
        stages = ", ".join(code(s) for s in pack.spec.gate.stages)
        items.append(
            f"pack: {code(pack.name)} ({where}), gate: {_gate_text(pack)}"
            + (f", stages: {stages}" if stages else "")
        )
        blocks.append(Bullets(items))
        rows = []
        for c in d.get("conditions", []):
            writes = c.get("write_files") or {}
            rows.append(
                [
                    code(c.get("name")),
                    ", ".join(code(p) for p in c.get("remove_files") or []) or DASH,
                    ", ".join(f"{code(p)} ({len(str(v))} chars)" for p, v in sorted(writes.items())) or DASH,
                    ", ".join(code(s) for s in c.get("skills") or []) or DASH,
                    DASH if c.get("tools") is None else ", ".join(code(t) for t in c["tools"]) or "(none)",
                    DASH if c.get("thinking") is None else code(c["thinking"]),
                    code(json.dumps(c.get("harness_options") or {}, sort_keys=True))
                    if c.get("harness_options")
                    else DASH,
                ]
            )
        if rows:
            blocks.append(
                Table(
                    ["condition", "removes", "writes", "skills", "tools", "thinking", "harness options"], rows
                )
            )
        blocks += _pin_blocks(source, tasks)
    return blocks


def _setting(value: object) -> str:
    """A design setting; None means the harness's or task's own default."""
    return "default" if value is None else code(value)


def _values(groups: list[tuple[dict[str, Any], int]], get: Any) -> Counter[str]:
    """How many records carry each value of `get`, over (a representative record, its count)."""
    values: Counter[str] = Counter()
    for record, count in groups:
        values[str(get(record))] += count
    return values


def _grouped(table: "pa.Table") -> dict[str, list[tuple[dict[str, Any], int]]]:
    """Per task, the records with the same pins and models as (a record of what they share, how
    many), grouped in Arrow: 100,000 records are a few groups."""
    keys = ["task", "pins", "model", "reported_model"]
    by_task: dict[str, list[tuple[dict[str, Any], int]]] = defaultdict(list)
    for group in table.group_by(keys).aggregate([("run_id", "count")]).to_pylist():
        record = {
            "task": group["task"],
            "pins": json.loads(group["pins"]) if group["pins"] is not None else {},
            "model": group["model"],
            "metrics": {"model": group["reported_model"]},
        }
        by_task[str(group["task"])].append((record, group["run_id_count"]))
    return by_task


def _pin_text(values: Counter[str], shorten: bool = False) -> str:
    def show(value: str) -> str:
        return value if value == BEFORE_PACKS else code(_short(value) if shorten else value)

    if len(values) <= 1:
        return ", ".join(show(v) for v in values) or DASH
    # Only reachable with --allow-mixed-pins: every value is listed with how many runs carry it.
    listed = ", ".join(f"{show(v)} ({n} runs)" for v, n in sorted(values.items()))
    return f"**mixed**: {listed}"


def _pin_blocks(source: _Source, tasks: list[str]) -> list[Block]:
    if not source.table.num_rows:
        return [Para("No scored records, so no pins.")]
    pins = [
        ("rig version", lambda r: r["pins"]["rig_version"], False),
        ("pack", lambda r: r["pins"].get("pack") or BEFORE_PACKS, False),
        ("pack hash", lambda r: r["pins"].get("pack_hash") or BEFORE_PACKS, True),
        ("harness version", lambda r: r["pins"]["harness_version"], False),
        ("model (configured)", lambda r: r.get("model"), False),
        ("model (reported by the harness)", lambda r: (r.get("metrics") or {}).get("model"), False),
        ("fixture hash", lambda r: r["pins"]["fixture_hash"], True),
        ("python", lambda r: r["pins"]["python_version"], False),
        ("ruff", lambda r: r["pins"]["ruff_version"], False),
        ("pytest", lambda r: r["pins"]["pytest_version"], False),
        ("toolchain hash", lambda r: r["pins"].get("toolchain_hash"), True),
    ]
    by_task = _grouped(source.table)
    groups = [group for task_groups in by_task.values() for group in task_groups]
    rows = [[name, _pin_text(_values(groups, get), shorten)] for name, get, shorten in pins]
    task_rows = [
        [
            code(task),
            _pin_text(_values(by_task[task], lambda r: r["pins"]["task_hash"]), True),
            _pin_text(_values(by_task[task], lambda r: r["pins"]["hidden_tests_hash"]), True),
        ]
        for task in [*tasks, *sorted(set(by_task) - set(tasks))]
        if task in by_task
    ]
    return [
        Para(
            f"Pins of the {source.table.num_rows} scored records "
            "(hashes: first 12 hex digits; full in record.json):"
        ),
        Table(["pin", "value"], rows),
        Table(["task", "task hash", "hidden-tests hash"], task_rows),
    ]


def _cell_blocks(
    cells: pd.DataFrame, infra: pd.DataFrame, arms: list[str], tasks: list[str], arm_word: str
) -> list[Block]:
    blocks: list[Block] = [
        Heading(2, "2. Success per cell"),
        Para(
            f"Scored runs per task and {arm_word}; success rate with its Wilson 95% CI; medians per run. "
            "Runs with incomplete metrics (the parser could not read all their usage) count for success "
            "but are left out of cost and token medians and comparisons. "
            f"**ALL** pools every task of a {arm_word}."
        ),
    ]
    rows = []
    for task in [*tasks, "ALL"]:
        for arm in arms:
            match = cells[(cells["task"] == task) & (cells["condition"] == arm)]
            if match.empty:
                continue
            row = match.iloc[0]
            label = "**ALL**" if task == "ALL" else code(task)
            rows.append(
                [
                    label,
                    code(arm),
                    fmt_count(row["n"]),
                    fmt_count(row["successes"]),
                    fmt_pct(row["success_rate"]),
                    fmt_ci_pct(row["ci_low"], row["ci_high"]),
                    fmt_usd(row["median_cost_usd"]),
                    fmt_count(row["median_total_tokens"]),
                    fmt_count(row["median_tool_calls"]),
                    fmt_seconds(row["median_wall_s"]),
                    fmt_count(row["incomplete_metrics"]),
                ]
            )
    headers = [
        "task",
        arm_word,
        "n",
        "successes",
        "success rate",
        "95% CI",
        "median cost",
        "median tokens",
        "median tool calls",
        "median wall",
        "incomplete metrics",
    ]
    blocks.append(Table(headers, rows, frozenset(range(2, len(headers)))))
    blocks.append(Para(_infra_text(infra)))
    return blocks


def _model_blocks(df: pd.DataFrame, arms: list[str], arm_word: str) -> list[Block]:
    """Tokens and cost per model: each arm's totals over its runs whose harness records usage per model,
    and the main model's share of them."""
    rows = []
    for arm in arms:
        sub = df[(df["condition"] == arm) & df["metrics_complete"].astype(bool)]
        split = sub[sub["main_model_tokens"].notna()]
        if split.empty:
            rows.append([code(arm), "0", DASH, DASH, DASH, DASH, "one model: the totals are its own"])
            continue
        tokens = float(split["total_tokens"].sum())
        main_tokens = float(split["main_model_tokens"].sum())
        priced = split[split["cost_usd"].notna() & split["main_model_cost_usd"].notna()]
        cost = float(priced["cost_usd"].sum())
        others = Counter(m for models in split["other_models"] for m in models)
        rows.append(
            [
                code(arm),
                str(len(split)),
                fmt_count(tokens),
                fmt_pct(main_tokens / tokens) if tokens else DASH,
                fmt_usd(cost) if len(priced) else DASH,
                fmt_pct(float(priced["main_model_cost_usd"].sum()) / cost) if cost else DASH,
                ", ".join(f"{code(m)} ({_plural(n, 'run')})" for m, n in sorted(others.items())) or "none",
            ]
        )
    headers = [
        arm_word,
        "runs split by model",
        "total tokens",
        "main model's share",
        "total cost",
        "main model's cost share",
        "other models (side requests, subagents)",
    ]
    return [
        Heading(3, "Tokens and cost per model"),
        Para(
            "Where the harness records usage per model (Claude Code's `modelUsage`), a run's totals are the "
            "sums of its models' parts: the main model (the one that answered) and side or subagent models. "
            f"Sums over the {arm_word}'s runs with complete metrics; a harness that records one total "
            "leaves nothing to split."
        ),
        Table(headers, rows, frozenset(range(1, 6))),
    ]


def _infra_text(infra: pd.DataFrame) -> str:
    reruns = int(infra["infra_reruns"].sum()) if not infra.empty else 0
    quarantined = int(infra["quarantined"].sum()) if not infra.empty else 0
    text = (
        f"**Infrastructure:** {_plural(reruns, 'infra rerun')} in total (attempts lost to the provider or "
        f"the harness, kept in quarantine.jsonl and run again), {_plural(quarantined, 'run')} still "
        "quarantined (no scored record, so missing from the table above)"
    )
    hit = infra[(infra["infra_reruns"] > 0) | (infra["quarantined"] > 0)] if not infra.empty else infra
    if hit.empty:
        return text + f"; per cell: none in any of the {len(infra)} cells."
    several = infra["experiment"].nunique() > 1
    per_cell = [
        f"{code(r.experiment) + ' ' if several else ''}{code(r.task)} / {code(r.condition)}: "
        f"{_plural(int(r.infra_reruns), 'rerun')}, {int(r.quarantined)} quarantined"
        for r in hit.sort_values(["experiment", "task", "condition"]).itertuples()
    ]
    return text + "; per cell: " + "; ".join(per_cell) + "."


def _hang_text(df: pd.DataFrame, arms: list[str], arm_word: str) -> str:
    """How many scored failures were the agent's own hangs, per arm: they stay in the denominator."""
    hung = df[df["hang"] != ""] if not df.empty and "hang" in df else df.iloc[0:0]
    text = (
        f"**Agent hangs:** {_plural(len(hung), 'scored run')} ended in the agent's own hang (a tool "
        "call that never returned: agent_hang; or the wall timeout: timeout), counted as failures, "
        "never as infrastructure"
    )
    if hung.empty:
        return text + "."
    per_arm = []
    for arm in arms:
        mine = hung[hung["condition"] == arm]
        if not mine.empty:
            counts = sorted(mine["hang"].value_counts().items())
            kinds = ", ".join(f"{kind} {count}" for kind, count in counts)
            per_arm.append(f"{code(arm)}: {kinds}")
    return text + f"; per {arm_word}: " + "; ".join(per_arm) + "."


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _comparison_blocks(comparisons: list[Comparison], arms: list[str], vs: bool) -> list[Block]:
    blocks: list[Block] = [Heading(2, "3. Comparisons")]
    if not comparisons:
        blocks.append(
            Para(f"Only one arm ({', '.join(code(a) for a in arms) or 'none'}): nothing to compare.")
        )
        return blocks
    what = "experiment" if vs else "condition"
    blocks.append(
        Para(
            f"Each row compares {what} B with the reference A ({code(arms[0])}). Success: difference in "
            "success rate, B − A, in percentage points; cost, tokens, tool calls and wall time: ratio of "
            "B to A (x-fold). Every effect has its 95% CI for the tasks as sampled: the effect on tasks like "
            "these (task-clustered, so it widens with few tasks), not only on the ones run; p-values are "
            "Holm-adjusted across all rows."
        )
    )
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
    blocks.append(Table(headers, rows, frozenset({2, 3, 5, 6, 7, 8})))
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
                    DASH if _missing(diff) else f"{diff * 100:+.1f} pp",
                    DASH if _missing(lo) else f"[{lo * 100:+.1f}, {hi * 100:+.1f}] pp",
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


def _sequential_blocks(source: _Source) -> list[Block]:
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
            f"; the next look waits for {_plural(len(result.pending), 'run')}" if result.pending else ""
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


def _share(series: pd.Series) -> str:
    values = series.dropna().astype(bool)
    if values.empty:
        return DASH
    return f"{fmt_pct(values.mean(), 0)} ({int(values.sum())}/{len(values)})"


def _compactions(series: pd.Series) -> str:
    """Mean compactions per run and the share of runs with at least one, among the runs whose
    harness records compactions (None elsewhere)."""
    counts = series.dropna().astype(float)
    if counts.empty:
        return DASH
    return f"mean {counts.mean():.2f}, {_share(counts > 0)}"


def _behaviour_blocks(df: pd.DataFrame, arms: list[str], arm_word: str) -> list[Block]:
    rows = []
    for arm in arms:
        sub = df[df["condition"] == arm]
        searches = sub["bash_search_commands"].astype(float)
        rows.append(
            [
                code(arm),
                str(len(sub)),
                _share(sub["ran_check_script"]),
                _share(sub["read_docs"]),
                _share(sub["read_agents_md"]),
                _share(sub["read_skill"]),
                _share(sub["tampered"]),
                f"{_share(searches > 0)}, mean {searches.mean():.2f}" if len(sub) else DASH,
                _share(sub["ran_tests"]),
                _share(sub["out_of_scope"].astype(float).clip(upper=1)),
                _share(sub["failing_stage"] == "budget"),
                _compactions(sub["compactions"]),
                _share(sub["tried_other_host"]),
            ]
        )
    headers = [
        arm_word,
        "runs",
        "ran the gate",
        "read docs",
        "read AGENTS.md",
        "read SKILL.md",
        "tampered",
        "shell searches (runs, mean count)",
        "ran the tests",
        "changed files outside the task's scope",
        "stopped at the run budget",
        "compactions (mean per run, runs with ≥ 1)",
        "tried to reach another host",
    ]
    return [
        Heading(2, "4. Behaviour"),
        Para(
            f"Share of scored runs per {arm_word} that did each thing, as parsed from the saved sessions; "
            "ran the gate: its command or script in the agent's shell; ran the tests: the pack's test "
            "runner (pytest, node --test, or a command the pack names); "
            "tampered = changed a protected file (restored before verification); tried to reach another "
            "host: the network policy refused at least one of its connections (among runs whose network "
            "was confined; docs/network.md); outside the task's scope: among runs of tasks with a "
            "`scope` (docs/packs.md); stopped at the run budget: the rig stopped the agent once its "
            "usage passed `[run_budget]` (failing stage `budget`; docs/budgets.md); compactions: the "
            "context compactions the harness's session records, among runs of harnesses that record "
            "them (README: Metrics)."
        ),
        Table(headers, rows, frozenset(range(1, len(headers)))),
    ]


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
    if fmt not in ("md", "html"):
        raise ValueError(f"unknown format {fmt!r}; use md or html")
    folders = [Path(f).resolve() for f in folders]
    out_dir = Path(out_dir).resolve()
    # The figures and failures.md are made in a worker process, which imports matplotlib while the
    # runs are read.
    with Worker(figures.warm_up) as worker:
        return _build(worker, folders, out_dir, vs, fmt, allow_mixed_pins, seed, view_dir)


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
    sources = [_read_source(f) for f in folders]

    arms = _arm_order(df, sources)
    tasks = sorted(str(t) for t in df["task"].unique()) if not df.empty else []
    cells = cell_table(df) if not df.empty else pd.DataFrame(columns=["task", "condition", "n"])
    comparisons = compare_conditions(df, reference=arms[0]) if len(arms) >= 2 else []

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
            f"{failures_link} with links to each run's receipts. "
            f"Success means the gate ({' / '.join(dict.fromkeys(_gate_text(p) for p in packs))}) exits 0 "
            "and the hidden tests pass; nothing is judged by a model."
        ),
    ]
    blocks += _design_blocks(sources, tasks)
    blocks += _cell_blocks(cells, infra, arms, tasks, arm_word)
    blocks.append(Para(_hang_text(df, arms, arm_word)))
    blocks += _model_blocks(df, arms, arm_word)
    blocks += _comparison_blocks(comparisons, arms, vs)
    for source in sources:
        blocks += _sequential_blocks(source)
    blocks += _behaviour_blocks(df, arms, arm_word)
    distribution = "Cost per run" if has_cost else "Total tokens per run (no run reported a cost)"
    captions = [
        f"Success rate per task and {arm_word} with Wilson 95% CIs (labels: successes/runs).",
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
