"""The report's tables of one or more experiments: design and pins, success per cell, infrastructure and
hangs, tokens and cost per model, behaviour."""

import json
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

import pandas as pd

from rig.experiment.estimate import spent
from rig.report.document import (
    DASH,
    Block,
    Bullets,
    Heading,
    Para,
    Table,
    fmt_ci_pct,
    fmt_count,
    fmt_pct,
    fmt_seconds,
    fmt_usd,
    plural,
    short,
)
from rig.report.failures import code
from rig.report.sources import Source, gate_text
from rig.store.results import ResultsStore

if TYPE_CHECKING:
    import pyarrow as pa

# What the pins of a record older than packs say about its pack.
BEFORE_PACKS = "(before packs)"


def design_blocks(sources: list[Source], tasks: list[str]) -> list[Block]:
    """Section 1: each experiment's design, its conditions and the pins of its records."""
    blocks: list[Block] = [Heading(2, "1. Design and pins")]
    for source in sources:
        d = source.design
        blocks.append(Heading(3, f"Experiment {code(source.name)}"))
        if source.imported is not None:
            blocks += _imported_blocks(source)
            continue
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
            items.append(f"design digest: {code(short(source.digest))}")
        # The pack as the design names it, read now: the pins below say which pack the runs measured.
        pack = source.pack
        where = code(d["pack"]) if d.get("pack") else "built-in"
        stages = ", ".join(code(s) for s in pack.spec.gate.stages)
        items.append(
            f"pack: {code(pack.name)} ({where}), gate: {gate_text(pack)}"
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


def _imported_blocks(source: Source) -> list[Block]:
    """The design of results another tool measured (`rig import`): where they come from, the arms,
    and what the records carry of the pins (the source's own, where it has them; never invented)."""
    d, imported = source.design, source.imported or {}
    inputs = imported.get("inputs") or {}
    items = [
        f"imported from {code(imported.get('kind', DASH))}"
        + (f" ({code(imported['tool_version'])})" if imported.get("tool_version") else "")
        + (f" by rig {code(imported['imported_by'])}" if imported.get("imported_by") else ""),
        "inputs: " + (", ".join(f"{code(k)} ← {code(v)}" for k, v in inputs.items()) or DASH),
        f"reference: {code(d.get('reference', DASH))}, estimand: {code(d.get('estimand', DASH))}",
        f"tasks: {len(source.distinct('task'))}",
    ]
    blocks: list[Block] = [Bullets(items)]
    if not source.table.num_rows:
        return [*blocks, Para("No scored records, so no pins.")]
    groups = [group for task_groups in _grouped(source.table).values() for group in task_groups]
    pins = [
        ("harness version", lambda r: r["pins"].get("harness_version") or DASH),
        ("model (configured)", lambda r: r.get("model") or DASH),
        ("model (reported)", lambda r: (r.get("metrics") or {}).get("model") or DASH),
    ]
    rows = [[name, _pin_text(_values(groups, get))] for name, get in pins]
    blocks.append(
        Para(f"What the {source.table.num_rows} imported records carry (— where the source records none):")
    )
    blocks.append(Table(["pin", "value"], rows))
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
        return value if value == BEFORE_PACKS else code(short(value) if shorten else value)

    if len(values) <= 1:
        return ", ".join(show(v) for v in values) or DASH
    # Only reachable with --allow-mixed-pins: every value is listed with how many runs carry it.
    listed = ", ".join(f"{show(v)} ({n} runs)" for v, n in sorted(values.items()))
    return f"**mixed**: {listed}"


def _pin_blocks(source: Source, tasks: list[str]) -> list[Block]:
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
        ("project environment", lambda r: r["pins"].get("environment_hash") or "none", True),
        ("environment packages", lambda r: r["pins"].get("environment_packages") or "none", True),
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


def cell_blocks(
    cells: pd.DataFrame, infra: pd.DataFrame, arms: list[str], tasks: list[str], arm_word: str
) -> list[Block]:
    """Section 2: success and medians per task and arm (`cells`), the infrastructure reruns under it."""
    blocks: list[Block] = [
        Heading(2, "2. Success per cell"),
        Para(
            f"Scored runs per task and {arm_word}; success rate with its Wilson 95% CI; medians per run. "
            "Runs with incomplete metrics (the parser could not read all their usage) count for success "
            "but are left out of cost and token medians and comparisons. "
            f"**ALL** pools every task of a {arm_word}; its 95% CI is clustered by task (for tasks like "
            "these: a task's runs are not independent evidence), so with few tasks it is wide."
        ),
    ]
    rows = []
    # Each cell's row found by key, not by a mask over the whole table per cell (quadratic: most of a
    # minute for an imported benchmark's thousands of cells); the first row of a cell, as before.
    by_cell = {(str(r["task"]), str(r["condition"])): r for r in reversed(cells.to_dict("records"))}
    for task in [*tasks, "ALL"]:
        for arm in arms:
            row = by_cell.get((task, arm))
            if row is None:
                continue
            label = "**ALL**" if task == "ALL" else code(task)
            rows.append(
                [
                    label,
                    code(arm),
                    fmt_count(row["n"]),
                    fmt_count(row["successes"]),
                    fmt_pct(row["success_rate"]),
                    fmt_ci_pct(row["ci_low"], row["ci_high"]),
                    # A metric whose column the runs lack has no median column (cell_table): a dash.
                    fmt_usd(row.get("median_cost_usd")),
                    fmt_count(row.get("median_total_tokens")),
                    fmt_count(row.get("median_tool_calls")),
                    fmt_seconds(row.get("median_wall_s")),
                    fmt_count(row.get("incomplete_metrics")),
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


def model_blocks(df: pd.DataFrame, arms: list[str], arm_word: str) -> list[Block]:
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
                ", ".join(f"{code(m)} ({plural(n, 'run')})" for m, n in sorted(others.items())) or "none",
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
        f"**Infrastructure:** {plural(reruns, 'infra rerun')} in total (attempts lost to the provider or "
        f"the harness, kept in quarantine.jsonl and run again), {plural(quarantined, 'run')} still "
        "quarantined (no scored record, so missing from the table above)"
    )
    hit = infra[(infra["infra_reruns"] > 0) | (infra["quarantined"] > 0)] if not infra.empty else infra
    if hit.empty:
        return text + f"; per cell: none in any of the {len(infra)} cells."
    several = infra["experiment"].nunique() > 1
    per_cell = [
        f"{code(r.experiment) + ' ' if several else ''}{code(r.task)} / {code(r.condition)}: "
        f"{plural(int(r.infra_reruns), 'rerun')}, {int(r.quarantined)} quarantined"
        for r in hit.sort_values(["experiment", "task", "condition"]).itertuples()
    ]
    return text + "; per cell: " + "; ".join(per_cell) + "."


def hang_text(df: pd.DataFrame, arms: list[str], arm_word: str) -> str:
    """How many scored failures were the agent's own hangs, per arm: they stay in the denominator."""
    hung = df[df["hang"] != ""] if not df.empty and "hang" in df else df.iloc[0:0]
    text = (
        f"**Agent hangs:** {plural(len(hung), 'scored run')} ended in the agent's own hang (a tool "
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


def behaviour_blocks(df: pd.DataFrame, arms: list[str], arm_word: str) -> list[Block]:
    """Section 4: the share of each arm's runs that did each thing the sessions show."""
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
