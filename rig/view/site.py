"""`rig view`: one experiment's results (or two, compared) as a static site to read runs by.

The site is plain HTML files with inline CSS and a little inline JavaScript, no request of any kind
(no CDN, no fetch of JSON), and relative links only, so it works opened from disk (file://), served
by `rig view --serve`, and from a copy of the results folder on another machine:

- `index.html`: the report's overview (`rig report --format html`, embedded) and the attempts by
  outcome; `report.html`, `failures.md` and `figures/` beside it;
- `runs.html`: every attempt, quarantined ones included, in one table filtered in the page by task,
  condition, outcome, failing stage and behaviour (the filter state lives in the URL's fragment,
  `runs.html#outcome=failure&task=t1_fix_pagination`);
- `runs/<experiment>/<run_id>/attempt-N.html`: one attempt: verdicts, tampering, audit findings,
  metrics, the transcript turn by turn with each tool call's arguments and output, the diff, and a
  link to every receipt in its attempt folder.

Everything shown comes from records and an agent's saved files, which are hostile: every value is
HTML-escaped by the template engine, agent text is rendered as Markdown with raw HTML off, and each
page carries a Content-Security-Policy that allows no resource from anywhere and runs no script but
the page's own, so even a rendering bug could not make an agent's output run or fetch anything.
What a page holds is bounded (long outputs are cut with a note and a link to the whole receipt).
"""

import base64
import hashlib
import json
import os
import re
import shutil
import stat
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

import jinja2
from markupsafe import Markup

from rig.confine.untrusted import read_bounded
from rig.report.links import INDEX_PAGE, RUNS_PAGE, attempt_page, default_view_dir
from rig.report.markdown_html import block_html
from rig.report.report import build_report
from rig.schema import Transcript
from rig.store.columns import is_unsealed
from rig.store.migrate import read_quarantine, read_runs
from rig.store.results import ResultsStore
from rig.store.transcripts import attempt_transcript

# What one page may hold: characters of one text, of one tool call's arguments or output, of a whole
# transcript, bytes of the diff and of a traceback, lines of a list.
TEXT_CHARS = 20_000
TOOL_CHARS = 8_000
TRANSCRIPT_CHARS = 1_500_000
DIFF_BYTES = 256 * 1024
TRACEBACK_BYTES = 32 * 1024
LIST_ITEMS = 200
RECEIPT_ENTRIES = 200
# The view folder's mark: a folder without it is never replaced (`--out` naming the wrong folder).
MARKER = ".rig-view"
# Receipts listed first on an attempt's page, in this order; any other file follows by name.
KNOWN_RECEIPTS = (
    "record.json",
    "session.jsonl",
    "session.json",
    "stdout.log",
    "stderr.log",
    "diff.patch",
    "check.json",
    "hidden-junit.xml",
    "traceback.txt",
)
OUTCOMES = ("success", "failure", "quarantined")
# Behaviours a run can be filtered by: key, label, whether a record shows it.
BEHAVIOURS: tuple[tuple[str, str, Callable[[dict[str, Any]], bool]], ...] = (
    # First: a run whose agent could read the hidden tests and the answers is no evidence either way.
    ("unsealed", "not sealed", is_unsealed),
    ("read_agents_md", "read AGENTS.md", lambda r: "AGENTS.md" in _metric_list(r, "docs_read")),
    ("read_docs", "read docs", lambda r: bool(_metric_list(r, "docs_read"))),
    ("read_skill", "read SKILL.md", lambda r: bool(_metrics(r).get("read_skill"))),
    ("ran_gate", "ran the gate", lambda r: bool(_metrics(r).get("ran_check_script"))),
    ("ran_tests", "ran the tests", lambda r: bool(_metrics(r).get("ran_tests"))),
    ("shell_search", "searched through the shell", lambda r: bool(_metric_list(r, "bash_search_commands"))),
    ("tool_errors", "tool errors", lambda r: bool(_metrics(r).get("tool_errors"))),
    ("tampered", "tampered", lambda r: bool(_touched(r))),
    ("other_host", "tried to reach another host", lambda r: bool(_refused(r))),
    ("out_of_scope", "changed files outside the scope", lambda r: bool(_items(r.get("out_of_scope")))),
    ("audit", "audit finding", lambda r: bool(r.get("audit"))),
    ("hang", "hang", lambda r: bool(r.get("hang"))),
    ("timed_out", "timed out", lambda r: bool(r.get("timed_out"))),
    ("stalled", "stalled", lambda r: bool(r.get("stalled"))),
)
NO_STAGE = "(none)"

_TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("rig.view", "templates"),
    autoescape=True,
    trim_blocks=True,
    lstrip_blocks=True,
)


class ViewError(ValueError):
    """The view cannot be written where asked."""


def _metrics(record: dict[str, Any]) -> dict[str, Any]:
    metrics = record.get("metrics")
    return metrics if isinstance(metrics, dict) else {}


def _metric_list(record: dict[str, Any], key: str) -> list[Any]:
    value = _metrics(record).get(key)
    return value if isinstance(value, list) else []


def _refused(record: dict[str, Any]) -> int:
    """Connections of the agent the network policy refused (0 for a record without a network block)."""
    network = record.get("network")
    refused = network.get("refused") if isinstance(network, dict) else None
    entries = refused if isinstance(refused, list) else []
    return sum(n for e in entries if isinstance(e, dict) and isinstance(n := e.get("connections"), int))


def _imported(record: dict[str, Any]) -> dict[str, Any] | None:
    """Where an imported record came from (`rig import`); None for a run this rig measured."""
    source = record.get("source")
    return source if isinstance(source, dict) else None


def _reported(record: dict[str, Any], value: Any) -> bool:
    """Whether a figure is known: an imported record's source may not report it (None), which is
    never shown as a zero."""
    return value is not None or _imported(record) is None


def _touched(record: dict[str, Any]) -> list[str]:
    protected = record.get("protected") if isinstance(record.get("protected"), dict) else {}
    return sorted({str(p) for key in ("modified", "added", "deleted") for p in protected.get(key) or []})


# -- what is read -------------------------------------------------------------------------------


@dataclass
class Attempt:
    """One stored attempt: its record, the results folder it is in, and where its page goes."""

    folder: Path
    record: dict[str, Any]
    quarantined: bool
    page: str = ""

    @property
    def outcome(self) -> str:
        if self.quarantined:
            return "quarantined"
        return "success" if self.record.get("success") else "failure"

    @property
    def stage(self) -> str:
        return str(self.record.get("failing_stage") or NO_STAGE)

    def sort_key(self) -> tuple[Any, ...]:
        r = self.record
        return (
            str(r.get("experiment")),
            str(r.get("task")),
            str(r.get("condition")),
            _int(r.get("repetition")),
            _int(r.get("attempt")),
            self.quarantined,
        )

    def artifacts(self) -> Path | None:
        """The attempt folder, if the record names one inside its results folder that is a plain
        directory all the way down (a link there would lead a reader's browser anywhere)."""
        rel = PurePosixPath(str(self.record.get("artifacts") or ""))
        if not rel.parts or rel.is_absolute() or ".." in rel.parts:
            return None
        path = self.folder
        for part in rel.parts:
            path = path / part
            try:
                if not stat.S_ISDIR(path.lstat().st_mode):
                    return None
            except OSError:
                return None
        return path


def _int(value: object) -> int:
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return 0


def read_attempts(folders: list[Path]) -> list[Attempt]:
    """Every scored and quarantined attempt of the results folders, in table order."""
    attempts = []
    for folder in folders:
        store = ResultsStore(folder)
        attempts += [Attempt(folder, r, False) for r in read_runs(store)]
        attempts += [Attempt(folder, r, True) for r in read_quarantine(store)]
    attempts.sort(key=Attempt.sort_key)
    for a in attempts:
        a.page = attempt_page(
            str(a.record.get("experiment")), str(a.record.get("run_id")), _int(a.record.get("attempt"))
        )
    return attempts


# -- bounded text -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Clip:
    """Text cut to what a page holds; `omitted` characters were left out."""

    text: str
    omitted: int = 0


def clip(text: str, limit: int) -> Clip:
    """`text` cut to `limit` characters."""
    return Clip(text, 0) if len(text) <= limit else Clip(text[:limit], len(text) - limit)


def _read_text(path: Path, limit: int) -> Clip | None:
    data = read_bounded(path, limit + 1)
    if data is None:
        return None
    text = data[:limit].decode("utf-8", errors="replace")
    if len(data) <= limit:
        return Clip(text)
    return Clip(text, max(path.lstat().st_size - limit, 1))


def _items(values: object) -> list[str]:
    items = [str(v) for v in values] if isinstance(values, list) else []
    return (
        items if len(items) <= LIST_ITEMS else [*items[:LIST_ITEMS], f"… and {len(items) - LIST_ITEMS} more"]
    )


# -- one attempt's page -------------------------------------------------------------------------


def _href(target: Path, page_dir: Path) -> str:
    return quote(Path(os.path.relpath(target, page_dir)).as_posix())


def _receipts(folder: Path | None, page_dir: Path) -> tuple[list[dict[str, Any]], int]:
    """The regular files of the attempt folder (links and special files are left out), known
    receipts first; and how many entries were left out past the bound."""
    if folder is None:
        return [], 0
    try:
        with os.scandir(folder) as it:
            entries = [e for e in it if e.is_file(follow_symlinks=False)]
    except OSError:
        return [], 0
    rank = {name: i for i, name in enumerate(KNOWN_RECEIPTS)}
    entries.sort(key=lambda e: (rank.get(e.name, len(rank)), e.name))
    shown = [
        {
            "name": e.name,
            "href": _href(folder / e.name, page_dir),
            "size": e.stat(follow_symlinks=False).st_size,
        }
        for e in entries[:RECEIPT_ENTRIES]
    ]
    return shown, max(len(entries) - RECEIPT_ENTRIES, 0)


def _json_text(value: object) -> str:
    return (
        value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
    )


@dataclass
class _Budget:
    left: int = TRANSCRIPT_CHARS

    def take(self, text: str, limit: int) -> Clip:
        shown = clip(text, min(limit, max(self.left, 0)))
        self.left -= len(shown.text)
        return shown


def _tokens(step: Any) -> str:
    parts = [
        f"{label} {value:,}"
        for label, value in (
            ("in", step.input_tokens),
            ("out", step.output_tokens),
            ("cache read", step.cache_read_tokens),
            ("cache write", step.cache_write_tokens),
            ("reasoning", step.reasoning_tokens),
        )
        if value
    ]
    return " · ".join(parts)


def _transcript_view(transcript: Transcript) -> dict[str, Any]:
    budget = _Budget()
    steps = []
    turn = 0
    for step in transcript.steps:
        if budget.left <= 0:
            break
        if step.source == "agent":
            turn += 1
        text = budget.take(step.text, TEXT_CHARS)
        steps.append(
            {
                "source": step.source,
                "label": f"turn {turn}" if step.source == "agent" else step.source,
                "model": step.model,
                "timestamp": step.timestamp,
                "html": Markup(block_html(text.text)) if step.source == "agent" else None,
                "text": text,
                "reasoning": budget.take(step.reasoning, TEXT_CHARS) if step.reasoning else None,
                "tokens": _tokens(step),
                "cost": step.cost_usd,
                "calls": [
                    {
                        "name": call.name,
                        "id": call.id,
                        "is_error": call.is_error,
                        "arguments": budget.take(_json_text(call.arguments), TOOL_CHARS),
                        "output": None if call.output is None else budget.take(call.output, TOOL_CHARS),
                    }
                    for call in step.tool_calls
                ],
            }
        )
    agent_steps = [s for s in transcript.steps if s.source == "agent"]
    costs = [s.cost_usd for s in agent_steps if s.cost_usd is not None]
    return {
        "harness": transcript.harness,
        "session_id": transcript.session_id,
        "model": transcript.model,
        "gaps": _items(transcript.gaps),
        "steps": steps,
        "omitted_steps": len(transcript.steps) - len(steps),
        "turns": len(agent_steps),
        "tool_calls": sum(len(s.tool_calls) for s in transcript.steps),
        "tokens": sum((s.input_tokens or 0) + (s.output_tokens or 0) for s in agent_steps),
        "cost": sum(costs) if costs else None,
    }


def _read_transcript(record: dict[str, Any], folder: Path | None) -> Transcript:
    harness = str(record.get("harness"))
    if folder is None:
        return Transcript(
            harness=harness, gaps=["the record names no attempt folder inside its results folder"]
        )
    try:
        return attempt_transcript(record, folder)
    # One attempt whose files an adapter cannot make sense of must not cost the reader every
    # other page: whatever went wrong is shown where the transcript would be.
    except Exception as exc:  # noqa: BLE001
        return Transcript(
            harness=harness, gaps=[f"the {harness} adapter could not read the session: {exc!r}"]
        )


def _diff_lines(clip_: Clip | None) -> list[tuple[str, str]]:
    if clip_ is None:
        return []
    lines = []
    for line in clip_.text.splitlines():
        if line.startswith(("+++", "---", "diff ", "index ")):
            kind = "file"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        else:
            kind = ""
        lines.append((kind, line))
    return lines


def _facts(record: dict[str, Any]) -> list[tuple[str, str]]:
    """The record's who, what and how long, as label/value pairs."""
    agent = record.get("agent") if isinstance(record.get("agent"), dict) else {}
    metrics = _metrics(record)
    sandbox = record.get("sandbox") if isinstance(record.get("sandbox"), dict) else {}
    cost = metrics.get("cost_usd")
    by_tool = metrics.get("tool_calls_by_name") if isinstance(metrics.get("tool_calls_by_name"), dict) else {}
    tool_errors = _int(metrics.get("tool_errors"))
    by_name = ", ".join(f"{name} {count}" for name, count in sorted(by_tool.items())) or "none"
    source = _imported(record)
    unreported = "not reported by the source"
    harness = " ".join(
        str(v) for v in (record.get("harness"), record.get("harness_version")) if v is not None
    )
    facts = [
        ("experiment", record.get("experiment")),
        ("task", record.get("task")),
        ("hypothesis", record.get("hypothesis")),
        ("condition", record.get("condition")),
        ("group", record.get("group")),
        ("repetition", record.get("repetition")),
        ("attempt", record.get("attempt")),
        (
            "imported from",
            f"{source.get('kind')}: {source.get('file')}, {source.get('item')}"
            + (f" ({source['tool_version']})" if source.get("tool_version") else "")
            if source
            else None,
        ),
        ("score", record.get("score")),
        ("harness", harness),
        ("model", record.get("model")),
        ("model reported", metrics.get("model")),
        ("thinking", record.get("thinking")),
        ("started", record.get("started_at")),
        (
            "wall time",
            f"{float(record.get('wall_s') or 0):.1f} s"
            if _reported(record, record.get("wall_s"))
            else unreported,
        ),
        ("agent exit code", agent.get("exit_code")),
        ("timed out", record.get("timed_out")),
        ("stalled", record.get("stalled")),
        ("hang", record.get("hang")),
        (
            "tokens",
            f"{_int(metrics.get('total_tokens')):,} (in {_int(metrics.get('input_tokens')):,}, "
            f"out {_int(metrics.get('output_tokens')):,}, cache read "
            f"{_int(metrics.get('cache_read_tokens')):,})"
            if _reported(record, metrics.get("total_tokens"))
            else unreported,
        ),
        ("cost", "—" if cost is None else f"${float(cost):.4f} ({metrics.get('cost_source')})"),
        (
            "tool calls",
            f"{_int(metrics.get('tool_calls'))} ({by_name}); {tool_errors} errors"
            if _reported(record, metrics.get("tool_calls"))
            else unreported,
        ),
        ("docs read", None if source else ", ".join(_metric_list(record, "docs_read")) or "none"),
        (
            "sandbox",
            f"{sandbox.get('mode')}, {'active' if sandbox.get('active') else 'inactive'}, "
            f"processes: {sandbox.get('processes')}"
            if sandbox
            else None,
        ),
        ("leftover processes", agent.get("leftover_processes") or None),
        ("links removed", ", ".join(_items(agent.get("removed_links"))) or None),
        ("worker", record.get("worker")),
        ("rig version", (record.get("pins") or {}).get("rig_version")),
    ]
    return [(label, str(value)) for label, value in facts if value is not None and value != ""]


def _unsealed_detail(record: dict[str, Any]) -> str:
    """How the sandbox was set for a run that was not sealed: its mode and why it was not active."""
    sandbox = record.get("sandbox") if isinstance(record.get("sandbox"), dict) else {}
    detail = sandbox.get("detail")
    return f"mode {sandbox.get('mode')}" + (f": {detail}" if detail else "")


def _attempt_view(
    attempt: Attempt, view_dir: Path, neighbours: tuple[Attempt | None, Attempt | None]
) -> dict:
    record = attempt.record
    page_dir = (view_dir / attempt.page).parent
    folder = attempt.artifacts()
    receipts, receipts_omitted = _receipts(folder, page_dir)
    session = next((r for r in receipts if r["name"].startswith("session.")), None)
    check = record.get("check") if isinstance(record.get("check"), dict) else None
    hidden = record.get("hidden") if isinstance(record.get("hidden"), dict) else None
    protected = record.get("protected") if isinstance(record.get("protected"), dict) else {}
    infra = record.get("infra") if isinstance(record.get("infra"), dict) else {}
    diff = _read_text(folder / "diff.patch", DIFF_BYTES) if folder else None
    traceback = _read_text(folder / "traceback.txt", TRACEBACK_BYTES) if folder else None
    stages = []
    if check:
        results = check.get("results") if isinstance(check.get("results"), dict) else {}
        stages = [
            {"name": str(name), "problems": [clip(p, TEXT_CHARS // 10) for p in _items(problems)]}
            for name, problems in results.items()
        ]
    root = Path(os.path.relpath(view_dir, page_dir)).as_posix() + "/"
    prev_, next_ = neighbours
    return {
        "title": f"{record.get('run_id')} attempt {record.get('attempt')}",
        "imported": _imported(record),
        "root": root,
        "run_id": str(record.get("run_id")),
        "attempt": record.get("attempt"),
        "verify_error": record.get("verify_error"),
        "rig_error": record.get("rig_error"),
        "outcome": attempt.outcome,
        "stage": attempt.stage,
        "infra": infra,
        "unsealed": _unsealed_detail(record) if is_unsealed(record) else None,
        "facts": _facts(record),
        "check": check,
        "check_failed": _items(check.get("failed")) if check else [],
        "stages": stages,
        "hidden": hidden,
        "hidden_failed": _items(hidden.get("failed")) if hidden else [],
        "hidden_skipped": _items(hidden.get("skipped")) if hidden else [],
        "protected": {k: _items(protected.get(k)) for k in ("modified", "added", "deleted")},
        "restored": protected.get("restored", True),
        "audit": [
            {"rule": str(f.get("rule")), "detail": clip(str(f.get("detail")), TEXT_CHARS // 10)}
            for f in record.get("audit") or []
            if isinstance(f, dict)
        ],
        "warnings": _items(record.get("warnings")),
        "files_changed": _items(record.get("files_changed")),
        "out_of_scope": _items(record.get("out_of_scope"))
        if record.get("out_of_scope") is not None
        else None,
        "workspace_limit": (record.get("workspace") or {}).get("limit")
        if isinstance(record.get("workspace"), dict)
        else None,
        "bash_commands": [clip(c, TEXT_CHARS // 10) for c in _items(_metric_list(record, "bash_commands"))],
        "receipts": receipts,
        "receipts_omitted": receipts_omitted,
        "session_href": session["href"] if session else None,
        "diff": diff,
        "diff_lines": _diff_lines(diff),
        "diff_href": next((r["href"] for r in receipts if r["name"] == "diff.patch"), None),
        "traceback": traceback,
        "transcript": _transcript_view(_read_transcript(record, folder)),
        "prev": _href(view_dir / prev_.page, page_dir) if prev_ else None,
        "next": _href(view_dir / next_.page, page_dir) if next_ else None,
        "runs_href": root + RUNS_PAGE,
    }


# -- the run table -------------------------------------------------------------------------------


def _row(attempt: Attempt) -> dict[str, Any]:
    r = attempt.record
    metrics = _metrics(r)
    hidden = r.get("hidden") if isinstance(r.get("hidden"), dict) else {}
    cost = metrics.get("cost_usd")
    return {
        "experiment": str(r.get("experiment")),
        "run_id": str(r.get("run_id")),
        "attempt": _int(r.get("attempt")),
        "task": str(r.get("task")),
        "condition": str(r.get("condition")),
        "repetition": _int(r.get("repetition")),
        "outcome": attempt.outcome,
        "stage": attempt.stage,
        "infra_rule": (r.get("infra") or {}).get("rule") if attempt.quarantined else None,
        "hidden_failed": len(hidden.get("failed") or []),
        # None: a figure an imported record's source does not report (shown as —, never 0).
        "tokens": _int(metrics.get("total_tokens")) if _reported(r, metrics.get("total_tokens")) else None,
        "cost": None if cost is None else float(cost),
        "tool_calls": _int(metrics.get("tool_calls")) if _reported(r, metrics.get("tool_calls")) else None,
        "wall_s": float(r.get("wall_s") or 0) if _reported(r, r.get("wall_s")) else None,
        "behaviours": [key for key, _, shows in BEHAVIOURS if shows(r)],
        "behaviour_labels": [label for _, label, shows in BEHAVIOURS if shows(r)],
        "href": attempt.page,
    }


def _filters(rows: list[dict[str, Any]], several: bool) -> list[dict[str, Any]]:
    """The table's filters: each dimension with its values and how many rows have each."""

    def values(dim: str, order: list[str] | None = None) -> list[dict[str, Any]]:
        counts = Counter(row[dim] for row in rows)
        keys = [v for v in order if v in counts] if order else sorted(counts)
        return [{"value": v, "label": v, "count": counts[v]} for v in keys]

    dims = [("experiment", "experiment", values("experiment"))] if several else []
    dims += [
        ("task", "task", values("task")),
        ("condition", "condition", values("condition")),
        ("outcome", "outcome", values("outcome", list(OUTCOMES))),
        ("stage", "failing stage", values("stage")),
    ]
    behaviour_counts = Counter(key for row in rows for key in row["behaviours"])
    dims.append(
        (
            "behaviour",
            "behaviour",
            [
                {"value": key, "label": label, "count": behaviour_counts[key]}
                for key, label, _ in BEHAVIOURS
                if behaviour_counts[key]
            ],
        )
    )
    return [{"dim": dim, "label": label, "options": options} for dim, label, options in dims]


# -- pages --------------------------------------------------------------------------------------


@dataclass
class _Site:
    """What every page shares: the stylesheet and the policy that forbids every other resource."""

    css: str = field(default_factory=lambda: _static("view.css"))
    script: str = field(default_factory=lambda: _static("runs.js"))

    def csp(self, script: str | None) -> str:
        # default-src 'none': no request to anywhere; images only the report's embedded figures; the
        # one script allowed is the page's own, by hash, so injected markup could not run one.
        allowed = "'none'"
        if script is not None:
            digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
            allowed = f"'sha256-{digest}'"
        return (
            "default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
            f"script-src {allowed}; base-uri 'none'; form-action 'none'"
        )

    def render(self, template: str, path: Path, script: str | None = None, **context: Any) -> None:
        html = _TEMPLATES.get_template(template).render(
            css=Markup(self.css),
            script=Markup(script) if script is not None else None,
            csp=self.csp(script),
            **context,
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(html, encoding="utf-8")


def _static(name: str) -> str:
    return (Path(__file__).parent / "templates" / name).read_text(encoding="utf-8")


_BODY = re.compile(r"<body>\n(.*)\n</body>", re.DOTALL)


def _report_body(report_html: Path) -> Markup:
    """The body of the HTML report the view wrote beside its pages (escaped by rig.report.report)."""
    match = _BODY.search(report_html.read_text(encoding="utf-8"))
    return Markup(match.group(1) if match else "")


def _prepare_out(out: Path) -> Path:
    """A fresh sibling folder of `out` to write the view into; refuses to replace a folder that
    is not a view."""
    if out.exists() or out.is_symlink():
        if out.is_symlink() or not out.is_dir():
            raise ViewError(f"{out} exists and is not a folder; choose another --out")
        if any(out.iterdir()) and not (out / MARKER).is_file():
            raise ViewError(f"{out} exists and is not a rig view; choose another --out or remove it")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    return tmp


def _swap_in(tmp: Path, out: Path) -> None:
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    if out.exists():
        out.rename(old)
    tmp.rename(out)
    if old.exists():
        shutil.rmtree(old)


def build_view(
    folders: list[Path],
    out: Path | None = None,
    vs: bool = False,
    allow_mixed_pins: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Write the view of the results folders into `out` (default: `view_links.default_view_dir`);
    return the folder. Nothing is half-written: the pages go to a temporary sibling folder, renamed
    into place once complete. `progress(done, total)` is called after each attempt's page.

    Raises ViewError when `out` is not a view folder, and whatever `build_report` raises for results
    it cannot report on (PoolingError, PackError) before anything is written.
    """
    folders = [Path(f).resolve() for f in folders]
    out = Path(out).resolve() if out is not None else default_view_dir(folders)
    attempts = read_attempts(folders)
    site = _Site()
    tmp = _prepare_out(out)
    try:
        total = len(attempts)
        for i, attempt in enumerate(attempts):
            neighbours = (attempts[i - 1] if i else None, attempts[i + 1] if i + 1 < total else None)
            # Links are computed from where the pages will be (`out`); they are written into `tmp`,
            # which sits beside it, so every relative link is the same in both.
            site.render("attempt.html.j2", tmp / attempt.page, **_attempt_view(attempt, out, neighbours))
            if progress:
                progress(i + 1, total)
        rows = [_row(a) for a in attempts]
        names = list(dict.fromkeys(str(a.record.get("experiment")) for a in attempts))
        names = names or [f.name for f in folders]
        title = "rig view: " + (" vs ".join(names) if vs else ", ".join(names))
        site.render(
            "runs.html.j2",
            tmp / RUNS_PAGE,
            script=site.script,
            title=title,
            root="",
            rows=rows,
            filters=_filters(rows, several=len(folders) > 1),
            several=len(folders) > 1,
        )
        # Attempts that were all quarantined are worth reading (why did every one fail?); only the
        # report needs scored runs.
        if any(not a.quarantined for a in attempts):
            build_report(
                folders,
                tmp,
                vs=vs,
                fmt="html",
                allow_mixed_pins=allow_mixed_pins,
                view_dir=tmp,
            )
        outcomes = Counter(a.outcome for a in attempts)
        unsealed = sum(1 for row in rows if "unsealed" in row["behaviours"])
        site.render(
            "index.html.j2",
            tmp / INDEX_PAGE,
            title=title,
            root="",
            outcomes=[(o, outcomes[o]) for o in OUTCOMES],
            total=total,
            unsealed=unsealed,
            report=_report_body(tmp / "report.html") if (tmp / "report.html").is_file() else None,
            results=[
                {
                    "name": f.name,
                    "files": [
                        {"name": n, "href": _href(f / n, out)}
                        for n in ("experiment.json", "runs.jsonl", "quarantine.jsonl")
                        if (f / n).is_file()
                    ],
                }
                for f in folders
            ],
        )
        (tmp / MARKER).write_text("written by rig view; replaced whole by the next `rig view`\n")
        _swap_in(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


# -- serving --------------------------------------------------------------------------------------


class _Handler(SimpleHTTPRequestHandler):
    """Static files below the root, never through a link out of it, without a log line per request."""

    def translate_path(self, path: str) -> str:
        local = Path(super().translate_path(path))
        root = Path(self.directory).resolve()
        # A link in the results folder must not serve what it points to outside it.
        return str(local) if local.resolve().is_relative_to(root) else str(root / ".rig-view-refused")

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve_root(view: Path, folders: list[Path]) -> Path:
    """The folder to serve so that the view and every receipt it links to are below it."""
    return Path(os.path.commonpath([Path(view).resolve(), *(Path(f).resolve() for f in folders)]))


def make_server(root: Path, port: int) -> ThreadingHTTPServer:
    """An HTTP server of the files below `root` on 127.0.0.1 (`port` 0: any free port)."""
    return ThreadingHTTPServer(("127.0.0.1", port), partial(_Handler, directory=str(root)))
