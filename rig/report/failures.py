"""failures.md, the report's work queue: every failed scored run, by failing stage, then by the
hidden tests that failed, each with links to its receipts (and its `rig view` page).

It imports nothing of the statistics layer: the report hands it plain columns, so it can be
written in the report's worker process (rig.report.background) while the report computes the rest.
"""

import math
import os
from collections import defaultdict, namedtuple
from pathlib import Path
from typing import Any

from rig.report.links import attempt_page

RECEIPTS = (
    "record.json",
    "diff.patch",
    "check.json",
    "hidden-junit.xml",
    "session.jsonl",
    "stdout.log",
    "stderr.log",
)


def code(value: object) -> str:
    """`value` as an inline code span (backticks inside would end the span, so they are replaced)."""
    return "`" + str(value).replace("`", "'") + "`"


def _oneline(message: object, limit: int = 120) -> str:
    # An error message may span lines or hold backticks; either would break the one-line entry.
    text = " ".join(str(message).split()).replace("`", "'")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def rel(path: Path, out_dir: Path) -> str:
    """`path` relative to `out_dir`, as a link in a page written there spells it."""
    return Path(os.path.relpath(path, out_dir)).as_posix()


class _Relative:
    """Attempt folders (`runs/<run_id>/attempt-N`) relative to `out_dir`, by one os.path.relpath per
    `runs/` folder: relpath normalises both paths each call, seconds for tens of thousands of runs."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self.bases: dict[str, str] = {}

    def __call__(self, path: str) -> str:
        parent, attempt = os.path.split(path)
        base, run = os.path.split(parent)
        if base not in self.bases:
            self.bases[base] = rel(Path(base), self.out_dir)
        return f"{self.bases[base]}/{run}/{attempt}"


def _receipts(folder: str) -> set[str]:
    """The names of the regular files in an attempt folder: one directory read, not a stat per
    receipt (a report of 100,000 runs links tens of thousands of failures)."""
    try:
        with os.scandir(folder) as entries:
            return {e.name for e in entries if e.is_file(follow_symlinks=False)}
    except OSError:
        return set()


# The columns of the scored runs `write_failures` reads (of load_runs' frame, as plain lists).
COLUMNS = [
    "artifacts", "failing_stage", "experiment", "run_id", "attempt", "task", "condition",
    "repetition", "timed_out", "stalled", "hang", "tampered",
]  # fmt: skip


def write_failures(
    failed: dict[str, list[Any]],
    total: int,
    records: dict[str, dict[str, Any]],
    out_dir: Path,
    several_experiments: bool,
    stages: list[str],
    view: Path | None = None,
) -> Path:
    """Write failures.md: every failed scored run, by failing stage, then by failed hidden tests.

    `failed` holds the COLUMNS of the failed runs (plain lists: iterating a frame row by row costs
    seconds at 100,000 runs), `total` the number of scored runs, `records` what else failures.md
    reads of each (rig.store.runs_cache.failure_details). `stages` orders the stage sections (see
    rig.report.report.stage_order); any other stage (audit, rig_error, a hang, ...) comes after them, by
    name. With `view` (a `rig view` folder), each run whose page is there links to it first: its
    transcript, diff and verdicts on one page.
    """
    links_to = _Relative(out_dir)
    groups: dict[str, dict[tuple[str, ...], list[tuple[tuple[Any, ...], str]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    Row = namedtuple("Row", COLUMNS)  # noqa: PYI024
    for row in map(Row._make, zip(*(failed[c] for c in COLUMNS), strict=True)):
        folder = str(row.artifacts)
        record = records.get(folder, {})
        stage = str(row.failing_stage) if not _missing_str(row.failing_stage) else "(none recorded)"
        hidden = record.get("hidden") or {}
        hidden_failed = tuple(sorted(hidden.get("failed") or []))
        check_failed = (record.get("check") or {}).get("failed") or []
        present = _receipts(folder)
        base = links_to(folder)
        links = " · ".join(f"[{name}]({base}/{name})" for name in RECEIPTS if name in present)
        page = view / attempt_page(str(row.experiment), str(row.run_id), int(row.attempt)) if view else None
        if page is not None and page.is_file():
            links = f"[view]({rel(page, out_dir)})" + (f" · {links}" if links else "")
        prefix = f"{code(row.experiment)} · " if several_experiments else ""
        # With --vs the frame's condition is the experiment (the arm); the record keeps the real one.
        condition = str(record.get("condition", row.condition))
        details = []
        if check_failed:
            details.append("gate failed: " + ", ".join(check_failed))
        if hidden.get("error"):
            details.append(f"hidden tests error: {_oneline(hidden['error'])}")
        if record.get("verify_error"):
            details.append(f"verify error: {_oneline(record['verify_error'])}")
        if bool(row.timed_out):
            details.append("timed out")
        if bool(row.stalled):
            details.append("stalled")
        if row.hang:
            details.append(f"the agent's own hang ({row.hang})")
        if bool(row.tampered):
            details.append("tampered with protected files")
        line = (
            f"- {prefix}{code(row.task)} · {code(condition)} · rep {int(row.repetition)} · "
            f"attempt {int(row.attempt)}" + (f" ({'; '.join(details)})" if details else "") + f": {links}"
        )
        sort_key = (
            str(row.experiment),
            str(row.task),
            condition,
            int(row.repetition),
            int(row.attempt),
        )
        groups[stage][hidden_failed].append((sort_key, line))

    lines = [
        "# Failures: the work queue",
        "",
        f"{len(failed['run_id'])} of {total} scored runs failed. They are grouped by the first failing "
        "stage of the gate (`hidden`: the gate passed and only hidden tests failed), then by the hidden "
        "tests that failed. Links are relative to this file.",
        "",
    ]

    def stage_key(stage: str) -> tuple[int, str]:
        return (stages.index(stage) if stage in stages else len(stages), stage)

    if groups:
        lines += ["| failing stage | runs |", "| :--- | ---: |"]
        for stage in sorted(groups, key=stage_key):
            lines.append(f"| {code(stage)} | {sum(len(v) for v in groups[stage].values())} |")
        lines.append("")
    for stage in sorted(groups, key=stage_key):
        by_tests = groups[stage]
        lines += [f"## Stage {code(stage)} ({sum(len(v) for v in by_tests.values())} runs)", ""]
        # Most common hidden-test signature first: it is the likeliest shared cause.
        for tests in sorted(by_tests, key=lambda t: (-len(by_tests[t]), t)):
            runs = sorted(by_tests[tests])
            title = (
                "Hidden tests failed: " + ", ".join(code(t) for t in tests)
                if tests
                else "No hidden test failed"
            )
            lines += [f"### {title} ({len(runs)} runs)", ""]
            lines += [line for _, line in runs]
            lines.append("")
    if not groups:
        lines += ["No failed runs.", ""]
    path = out_dir / "failures.md"
    path.write_text("\n".join(lines).rstrip("\n") + "\n")
    return path


def _missing_str(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value == ""
