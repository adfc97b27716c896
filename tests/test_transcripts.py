"""Transcripts of every harness's saved session: what parse_files counts, step by step."""

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from mock_ledger import ledger

from harnesses.claude_code import session as claude_code
from harnesses.codex import session as codex
from harnesses.gemini import adapter as gemini
from harnesses.opencode import session as opencode
from harnesses.pi import adapter as pi
from harnesses.registry import read_transcript
from harnesses.scripted import adapter as scripted
from rig.schema import AgentRun, Metrics, Transcript
from rig.store.migrate import read_runs
from rig.store.results import ResultsStore
from rig.store.transcripts import attempt_transcript, saved_run

DATA = Path(__file__).parent / "data"
SMALL = DATA / "results_small" / "results_small"
# Harness name -> (capture folder, session file, how its adapter module parses the files).
CAPTURED = {
    "pi": ("pi", "session.jsonl", lambda run: pi.parse_files(run.session_path, run.stdout_path)),
    "claude-code": (
        "claude_code",
        "session.jsonl",
        lambda run: claude_code.parse_files(run.stdout_path, run.session_path, run.command),
    ),
    "codex": ("codex", "session.jsonl", lambda run: codex.parse_files(run.session_path, run.stdout_path)),
    "gemini": ("gemini", "session.jsonl", lambda run: gemini.parse_files(run.session_path, run.stdout_path)),
    "opencode": (
        "opencode",
        "session.json",
        lambda run: opencode.parse_files(run.session_path, run.stdout_path),
    ),
}
# Per-turn usage each harness records (Gemini CLI counts no cache writes).
TOKENS = {
    "pi": ("input", "output", "cache_read", "cache_write"),
    "claude-code": ("input", "output", "cache_read", "cache_write", "reasoning"),
    "codex": ("input", "output", "cache_read", "cache_write", "reasoning"),
    "gemini": ("input", "output", "cache_read", "reasoning"),
    "opencode": ("input", "output", "cache_read", "cache_write", "reasoning"),
    "scripted": ("input", "output", "cache_read", "cache_write"),
}
# Harnesses that record a cost per response (the others are priced by the rig as a whole).
COST_PER_TURN = {"pi", "opencode", "scripted"}
PROMPT = "Paginated list endpoints report `has_next: true` on the last page"


def captured_run(folder: Path, session: str) -> AgentRun:
    command = folder / "command.json"
    return AgentRun(
        command=json.loads(command.read_text()) if command.is_file() else [],
        exit_code=0,
        timed_out=False,
        stalled=False,
        wall_s=1.0,
        session_path=folder / session if (folder / session).is_file() else None,
        stdout_path=folder / "stdout.log",
        stderr_path=folder / "stderr.log",
    )


def small_attempt() -> tuple[dict, Path]:
    """The first scored attempt of the committed results folder (scripted harness)."""
    record = read_runs(ResultsStore(SMALL))[0]
    return record, SMALL / record["artifacts"]


def success_cases() -> dict[str, tuple[Transcript, Metrics, Path]]:
    """Each harness's success session as its transcript, its metrics and its folder."""
    cases = {}
    for harness, (folder, session, parse) in CAPTURED.items():
        run = captured_run(DATA / folder / "success", session)
        cases[harness] = (read_transcript(harness, run), parse(run), DATA / folder / "success")
    record, folder = small_attempt()
    run = saved_run(record, folder)
    cases["scripted"] = (
        attempt_transcript(record, folder),
        scripted.parse_session_file(run.session_path),
        folder,
    )
    return cases


SUCCESS = success_cases()


def agent_steps(transcript: Transcript) -> list:
    return [s for s in transcript.steps if s.source == "agent"]


@pytest.mark.parametrize("harness", list(SUCCESS))
def test_success_transcript_agrees_with_the_parsed_metrics(harness):
    transcript, metrics, _ = SUCCESS[harness]
    turns = agent_steps(transcript)

    assert transcript.harness == harness and transcript.gaps == []
    assert transcript.steps[0].source == "user" and transcript.steps[0].text.lstrip('"').startswith(PROMPT)
    assert len(turns) == metrics.assistant_messages
    calls = [call for turn in turns for call in turn.tool_calls]
    assert Counter(call.name for call in calls) == metrics.tool_calls_by_name
    assert all(call.output is not None and call.is_error is not None for call in calls)
    assert sum(call.is_error for call in calls) == metrics.tool_errors
    for key in TOKENS[harness]:
        assert sum(getattr(t, f"{key}_tokens") for t in turns) == getattr(metrics, f"{key}_tokens"), key
    if harness in COST_PER_TURN:
        assert sum(t.cost_usd for t in turns) == pytest.approx(metrics.cost_usd)
    else:
        assert all(t.cost_usd is None for t in turns)
    assert turns[-1].text == metrics.final_text
    assert transcript.model is not None
    if harness != "scripted":  # its imitation of Pi's session keeps no id and no times
        assert transcript.session_id and all(t.timestamp for t in turns)


@pytest.mark.parametrize("harness", list(CAPTURED))
def test_success_transcript_equals_what_the_mock_served(harness):
    transcript, _, folder = SUCCESS[harness]
    turns = agent_steps(transcript)
    keys = TOKENS[harness]
    totals, tools = ledger(folder, keys)

    served = {key: sum(getattr(t, f"{key}_tokens") for t in turns) for key in keys}
    if harness == "opencode":
        # Chat Completions has no field for cache writes: OpenCode counts them as reads.
        totals["cache_read"] += totals.pop("cache_write")
        served.pop("cache_write")
    assert {**served, "responses": len(turns)} == totals
    assert Counter(c.name for t in turns for c in t.tool_calls) == tools


def test_provider_errors_and_retries_are_system_steps():
    def transcript(harness: str, case: str) -> Transcript:
        folder, session, _ = CAPTURED[harness]
        return read_transcript(harness, captured_run(DATA / folder / case, session))

    retried = transcript("claude-code", "retry")
    assert [s.source for s in retried.steps] == ["user", "system", "agent", "agent"]
    assert "overloaded" in retried.steps[1].text
    recovered = transcript("opencode", "retry_recovered")
    assert [s.source for s in recovered.steps][:4] == ["user", "agent", "system", "agent"]
    for harness, case in (("codex", "http_500"), ("gemini", "http_500"), ("opencode", "http_500")):
        failed = transcript(harness, case)
        assert not agent_steps(failed) and failed.steps[-1].source == "system", harness
        assert failed.steps[0].source == "user"


def torn(folder: Path, session: str, tmp_path: Path) -> Path:
    """A copy of `folder` whose session and stream end mid-line and hold a line that is no object."""
    copy = Path(shutil.copytree(folder, tmp_path / folder.name))
    for name in (session, "stdout.log"):
        data = (copy / name).read_bytes()
        (copy / name).write_bytes(b"[1, 2]\n" + data[: len(data) // 2])
    return copy


@pytest.mark.parametrize("harness", list(CAPTURED))
def test_a_torn_session_gives_gaps_not_an_exception(harness, tmp_path):
    folder, session, _ = CAPTURED[harness]
    copy = torn(DATA / folder / "success", session, tmp_path)

    transcript = read_transcript(harness, captured_run(copy, session))

    assert transcript.gaps


@pytest.mark.parametrize("harness", list(CAPTURED))
def test_fields_of_the_wrong_type_give_no_exception(harness, tmp_path):
    folder, session, _ = CAPTURED[harness]
    copy = Path(shutil.copytree(DATA / folder / "success", tmp_path / "odd"))
    odd = {"message": 3, "content": {"x": 1}, "usage": [], "tokens": "many", "toolCalls": 5, "payload": []}
    lines = [
        json.dumps({**odd, "type": kind, "role": role})
        for kind in ("assistant", "user", "gemini", "response_item", "token_usage_record", "message", "error")
        for role in ("assistant", "user", "toolResult", None)
    ]
    if session.endswith(".json"):
        (copy / session).write_text(
            json.dumps({"info": [], "messages": [odd, {"info": odd, "parts": [odd]}]})
        )
    else:
        (copy / session).write_text("\n".join(lines) + "\n")
    (copy / "stdout.log").write_text("\n".join(lines) + "\n")

    transcript = read_transcript(harness, captured_run(copy, session))

    assert transcript.harness == harness


def test_missing_files_are_named_in_gaps(tmp_path):
    for harness in CAPTURED:
        run = captured_run(tmp_path, "none")
        assert read_transcript(harness, run).gaps, harness


def test_a_symlink_in_the_attempt_folder_is_not_followed(tmp_path):
    record, folder = small_attempt()
    copy = Path(shutil.copytree(folder, tmp_path / "attempt"))
    secret = tmp_path / "secret.txt"
    secret.write_text("do not read")
    (copy / "stdout.log").unlink()
    (copy / "stdout.log").symlink_to(secret)

    transcript = attempt_transcript(record, copy)

    assert transcript.steps == [] and "stdout.log" in transcript.gaps[0]
