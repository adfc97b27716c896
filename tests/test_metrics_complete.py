"""Never silent zeros: sessions a parser cannot fully read give metrics flagged incomplete, with the
reason; older records migrate with the flag; reports count such runs per cell and leave them out of
the cost and token comparisons (their success still counts)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harnesses.claude_code import session as claude_code
from harnesses.codex import session as codex
from harnesses.gemini import adapter as gemini
from harnesses.logs import NO_USAGE_GAP
from harnesses.opencode import session as opencode
from harnesses.pi import adapter as pi
from rig.analysis import cell_table, compare_conditions, load_runs
from rig.report.report import build_report
from rig.schema import RECORD_SCHEMA_VERSION, Metrics
from rig.store.migrate import LEGACY_ZEROS_GAP, migrate

DATA = Path(__file__).parent / "data"
SMALL = DATA / "results_small" / "results_small"
# The cell whose runs are marked incomplete in the report tests.
TASK, ARM = "t2_add_endpoint", "agents_md"


def _lines(path: Path, entries: list[dict]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return path


def _entry(kind: str, payload: dict) -> dict:
    return {"timestamp": "2026-01-01T00:00:00Z", "type": kind, "payload": payload}


CALL = _entry(
    "response_item",
    {"type": "function_call", "name": "exec_command", "call_id": "c1", "arguments": '{"cmd": "ls"}'},
)


def test_codex_usage_in_an_unknown_entry_is_a_gap_not_zeros(tmp_path: Path) -> None:
    usage = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
    rollout = _lines(
        tmp_path / "session.jsonl",
        [_entry("session_meta", {"id": "s"}), CALL, _entry("usage_report", {"usage": usage})],
    )
    metrics = codex.parse_files(rollout, None)
    assert metrics.tool_calls == 1 and metrics.total_tokens == 0
    assert not metrics.complete
    assert metrics.gaps == ["usage in rollout entries of type 'usage_report', not read", NO_USAGE_GAP]


def test_codex_rollout_of_an_unknown_format_is_a_gap(tmp_path: Path) -> None:
    rollout = _lines(
        tmp_path / "session.jsonl", [{"record_type": "state"}, {"kind": "message", "text": "hi"}]
    )
    metrics = codex.parse_files(rollout, None)
    assert not metrics.complete and metrics.gaps[0].startswith(
        "rollout of a format this parser does not know"
    )


def test_claude_code_unknown_event_with_usage_is_a_gap(tmp_path: Path) -> None:
    source = DATA / "claude_code" / "success"
    stream = (source / "stdout.log").read_text()
    extra = {"type": "usage_summary", "usage": {"input_tokens": 7}}
    (tmp_path / "stdout.log").write_text(stream + json.dumps(extra) + "\n")
    metrics = claude_code.parse_files(tmp_path / "stdout.log", source / "session.jsonl", [])
    assert metrics.total_tokens == 6520 and not metrics.complete
    assert metrics.gaps == ["usage in stream-json events of type 'usage_summary', not read"]


def test_pi_unknown_session_version_and_renamed_usage_are_gaps(tmp_path: Path) -> None:
    source = DATA / "pi" / "success"
    entries = [json.loads(line) for line in (source / "session.jsonl").read_text().splitlines()]
    entries[0]["version"] = 9
    for entry in entries:
        message = entry.get("message") or {}
        if message.get("role") == "assistant":
            # A later format naming its usage fields otherwise: Pi's names read as zero.
            message["usage"] = {"prompt_tokens": 1000, "completion_tokens": 100}
    metrics = pi.parse_files(_lines(tmp_path / "session.jsonl", entries), None)
    assert metrics.total_tokens == 0 and not metrics.complete
    assert metrics.gaps[0] == "session format version 9, which this parser does not know"
    assert NO_USAGE_GAP in metrics.gaps


UNKNOWN_LINES = [{"record_type": "state"}, {"kind": "message", "text": "hi"}]


@pytest.mark.parametrize(
    ("harness", "file", "gap"),
    [
        ("claude_code", "stream", "stream-json of a format this parser does not know"),
        ("claude_code", "session", "transcript of a format this parser does not know"),
        ("gemini", "session", "session of a format this parser does not know"),
        ("gemini", "stream", "event stream of a format this parser does not know"),
        ("opencode", "session", "session export of a format this parser does not know"),
        ("opencode", "stream", "event stream of a format this parser does not know"),
    ],
)
def test_a_stored_file_of_an_unknown_format_is_a_gap_not_zeros(
    tmp_path: Path, harness: str, file: str, gap: str
) -> None:
    """A session or stream none of whose entries the parser knows gives no silent zeros."""
    path = _lines(tmp_path / "saved", UNKNOWN_LINES)
    if harness == "opencode" and file == "session":
        path.write_text(json.dumps({"format": 9, "entries": UNKNOWN_LINES}))
    parse = {
        "claude_code": lambda s, o: claude_code.parse_files(o, s, []),
        "gemini": gemini.parse_files,
        "opencode": opencode.parse_files,
    }[harness]
    metrics = parse(path, None) if file == "session" else parse(None, path)
    assert metrics.total_tokens == 0 and not metrics.complete
    assert any(g.startswith(gap) for g in metrics.gaps), metrics.gaps


def test_captured_successes_are_complete() -> None:
    folders = {h: DATA / h / "success" for h in ("pi", "codex", "claude_code", "gemini", "opencode")}
    parsed = [
        pi.parse_files(folders["pi"] / "session.jsonl", folders["pi"] / "stdout.log"),
        codex.parse_files(folders["codex"] / "session.jsonl", folders["codex"] / "stdout.log"),
        claude_code.parse_files(
            folders["claude_code"] / "stdout.log", folders["claude_code"] / "session.jsonl", []
        ),
        gemini.parse_files(folders["gemini"] / "session.jsonl", folders["gemini"] / "stdout.log"),
        opencode.parse_files(folders["opencode"] / "session.json", folders["opencode"] / "stdout.log"),
    ]
    assert all(m.complete and m.total_tokens > 0 for m in parsed)
    # Gemini has no cache-write field: a figure it does not record, its totals exact all the same.
    assert [m.gaps for m in parsed] == [
        [pi.NO_REASONING_GAP],
        [],
        [],
        [gemini.NO_CACHE_WRITE_GAP],
        [opencode.NO_CACHE_WRITE_GAP],
    ]


def test_migration_flags_old_silent_zeros_only() -> None:
    base = json.loads((SMALL / "runs.jsonl").read_text().splitlines()[0])
    assert base["record_schema"] < RECORD_SCHEMA_VERSION
    kept = migrate(base)["metrics"]
    assert kept["complete"] and kept["gaps"] == [] and kept["per_model"] == {}
    zeros = {**base, "metrics": {**base["metrics"], "total_tokens": 0, "output_tokens": 0}}
    flagged = migrate(zeros)["metrics"]
    assert not flagged["complete"] and flagged["gaps"] == [LEGACY_ZEROS_GAP]
    Metrics.model_validate(flagged)


@pytest.fixture(scope="module")
def marked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of results_small whose runs of (TASK, ARM) are incomplete, with a tenfold cost."""
    folder = tmp_path_factory.mktemp("complete") / "results_small"
    shutil.copytree(SMALL, folder)
    records = [json.loads(line) for line in (folder / "runs.jsonl").read_text().splitlines()]
    for record in records:
        if (record["task"], record["condition"]) == (TASK, ARM):
            metrics = record["metrics"]
            metrics["cost_usd"] *= 10
            metrics["total_tokens"] *= 10
            metrics |= {"complete": False, "gaps": ["usage in entries of type 'x', not read"]}
    _lines(folder / "runs.jsonl", records)
    return folder


def test_incomplete_runs_leave_cost_and_token_comparisons_only(marked: Path) -> None:
    df = load_runs(marked)
    assert int((~df["metrics_complete"]).sum()) == 3
    cells = cell_table(df).set_index(["task", "condition"])
    assert cells.loc[(TASK, ARM), "incomplete_metrics"] == 3
    assert cells.loc[(TASK, ARM), "n"] == 3 and cells.loc[("ALL", ARM), "incomplete_metrics"] == 3
    # With no complete run left, the cell has no cost or token median (not the tenfold ones).
    assert cells.loc[(TASK, ARM), ["median_cost_usd", "median_total_tokens"]].isna().all()
    clean = cell_table(load_runs(SMALL)).set_index(["task", "condition"])
    assert cells.loc[(TASK, ARM), "median_tool_calls"] == clean.loc[(TASK, ARM), "median_tool_calls"]
    by_metric = {c.metric: c for c in compare_conditions(df, reference="no_agents_md")}
    for metric in ("cost_usd", "total_tokens"):
        assert by_metric[metric].n_b == 12 and by_metric[metric].n_tasks == 4
        assert "3 runs with incomplete metrics dropped" in str(by_metric[metric].note)
    assert by_metric["success"].n_b == 15 and by_metric["tool_calls"].n_b == 15


def test_report_counts_incomplete_runs_per_cell(marked: Path, tmp_path: Path) -> None:
    build_report([marked], tmp_path / "out", seed=3)
    text = (tmp_path / "out" / "report.md").read_text()
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| task |") and "incomplete" in line)
    rows = [line.strip("|").split(" | ") for line in lines[header + 2 :] if line.startswith("|")]
    counts = {(r[0].strip().strip("`"), r[1].strip().strip("`")): r[-1].strip() for r in rows}
    assert counts[(TASK, ARM)] == "3" and counts[(TASK, "no_agents_md")] == "0"


def test_reclassify_replaces_metrics_with_the_current_parse(tmp_path: Path) -> None:
    """Metrics an older parser got wrong (here: zeros, flagged incomplete) are re-parsed from the
    stored session by `rig reclassify --write`, and the re-parsed metrics replace them."""
    shutil.copytree(SMALL, tmp_path / "results_small")
    shutil.copy(DATA / "results_small.toml", tmp_path / "results_small.toml")
    runs = tmp_path / "results_small" / "runs.jsonl"
    records = [json.loads(line) for line in runs.read_text().splitlines()]
    original = dict(records[0]["metrics"])
    zeros = dict.fromkeys(("input_tokens", "output_tokens", "cache_read_tokens", "total_tokens"), 0)
    records[0]["metrics"] |= zeros | {"cost_usd": None}
    _lines(runs, records)
    env = {**os.environ, "RIG_RESULTS_ROOT": str(tmp_path)}

    def reclassify(*args: str) -> str:
        command = [str(Path(sys.executable).with_name("rig")), "reclassify", "results_small.toml", *args]
        proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    assert f"runs: {records[0]['run_id']} attempt 1: scored -> scored (metrics changed)" in reclassify()
    assert migrate(records[0])["metrics"]["gaps"] == [LEGACY_ZEROS_GAP]
    reclassify("--write")
    (fixed,) = [json.loads(line) for line in runs.read_text().splitlines() if records[0]["run_id"] in line]
    assert fixed["record_schema"] == RECORD_SCHEMA_VERSION
    assert fixed["metrics"]["complete"] and fixed["metrics"]["gaps"] == []
    for key in (*zeros, "cost_usd"):
        assert fixed["metrics"][key] == original[key], key


def test_opencode_and_gemini_usage_in_unread_entries_is_a_gap(tmp_path: Path) -> None:
    source = DATA / "opencode" / "success"
    extra = {"type": "compaction", "part": {"type": "compaction", "tokens": {"input": 5}}}
    (tmp_path / "stdout.log").write_text((source / "stdout.log").read_text() + json.dumps(extra) + "\n")
    metrics = opencode.parse_files(None, tmp_path / "stdout.log")
    assert metrics.total_tokens == 18040
    assert metrics.gaps == ["usage in entries of type 'compaction', not read", opencode.NO_CACHE_WRITE_GAP]
    source = DATA / "gemini" / "success"
    extra = {"type": "model_usage", "usage": {"promptTokenCount": 5}}
    (tmp_path / "gemini.log").write_text((source / "stdout.log").read_text() + json.dumps(extra) + "\n")
    metrics = gemini.parse_files(source / "session.jsonl", tmp_path / "gemini.log")
    assert metrics.total_tokens == 19200 and metrics.gaps == [
        gemini.NO_CACHE_WRITE_GAP,
        "usage in entries of type 'model_usage', not read",
    ]
