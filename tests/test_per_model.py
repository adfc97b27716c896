"""Tokens and cost per model (`Metrics.per_model`) for every harness: the entries a parser reads by
model, else the run's totals as one entry under the model its session names, else a gap."""

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from harnesses.codex.adapter import CodexHarness
from harnesses.gemini.adapter import NO_CACHE_WRITE_GAP, GeminiHarness, parse_files
from harnesses.logs import NO_MODEL_GAP, fill_per_model
from harnesses.opencode.adapter import OpenCodeHarness
from harnesses.pi.adapter import PiHarness
from rig.schema import AgentRun, Metrics, ModelUsage, Provider, Task

DATA = Path(__file__).parent / "data"
STALL_S = 30.0
TOKEN_FIELDS = tuple(f for f in ModelUsage.model_fields if f != "cost_usd")
ADAPTERS = {"pi": PiHarness, "codex": CodexHarness, "opencode": OpenCodeHarness, "gemini": GeminiHarness}
SESSION_FILES = {"opencode": "session.json"}
FLASH = "gemini-2.5-flash"


def captured(folder: Path, session: str = "session.jsonl") -> AgentRun:
    """The AgentRun of a captured run, as `rig reclassify` rebuilds it from stored files."""
    return AgentRun(
        command=["agent"],
        exit_code=0,
        timed_out=False,
        stalled=False,
        wall_s=1.0,
        session_path=folder / session if (folder / session).exists() else None,
        stdout_path=folder / "stdout.log",
        stderr_path=folder / "stderr.log",
    )


def totals(metrics: Metrics) -> ModelUsage:
    """The run's token and cost totals as one model's usage."""
    return ModelUsage(**{f: getattr(metrics, f) for f in (*TOKEN_FIELDS, "cost_usd")})


def summed(parts: list[ModelUsage]) -> dict[str, int]:
    return {f: sum(getattr(p, f) for p in parts) for f in TOKEN_FIELDS}


def rewrite_jsonl(source: Path, target: Path, change: Callable[[dict], dict | None]) -> None:
    """Copy a JSONL file, each object passed through `change` (None drops it)."""
    lines = []
    for line in source.read_text().splitlines():
        entry = change(json.loads(line))
        if entry is not None:
            lines.append(json.dumps(entry))
    target.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_captured_success_has_one_entry_equal_to_the_totals(name: str, task: Task) -> None:
    """A single-model run: one entry, under the model the session names, holding every token
    figure and the cost of the totals."""
    adapter = ADAPTERS[name](task, Provider(), None, "high", STALL_S)
    metrics = adapter.parse_session(
        captured(DATA / name / "success", SESSION_FILES.get(name, "session.jsonl"))
    )

    assert metrics.model is not None and metrics.total_tokens > 0 and metrics.cost_usd is not None
    assert metrics.per_model == {metrics.model: totals(metrics)}
    assert NO_MODEL_GAP not in metrics.gaps


VERSIONS = [
    (name, folder.name)
    for name in sorted(ADAPTERS)
    for folder in sorted((DATA / name / "versions").glob("*/"))
]


@pytest.mark.parametrize(("name", "version"), VERSIONS)
def test_every_captured_version_has_one_entry_equal_to_the_totals(
    name: str, version: str, task: Task
) -> None:
    """Older CLIs record usage elsewhere (Gemini CLI 0.18: the stream's totals alone, without a
    table per model): the one entry is still the totals, under the model the files name."""
    adapter = ADAPTERS[name](task, Provider(), None, "high", STALL_S)
    folder = DATA / name / "versions" / version
    metrics = adapter.parse_session(captured(folder, SESSION_FILES.get(name, "session.jsonl")))

    assert metrics.model is not None and metrics.total_tokens > 0
    assert metrics.per_model == {metrics.model: totals(metrics)}


def test_gemini_entries_follow_the_model_each_response_names(task: Task, tmp_path: Path) -> None:
    """Gemini CLI may route requests to a flash model: each model gets the sum of its responses,
    thoughts included, and its cost; the entries sum to the totals."""
    folder = DATA / "gemini" / "success"
    responses: list[str] = []

    def route(entry: dict) -> dict:
        # Every other response goes to flash, each record of it alike.
        if entry.get("type") == "gemini":
            if entry["id"] not in responses:
                responses.append(entry["id"])
            if responses.index(entry["id"]) % 2:
                entry["model"] = FLASH
        return entry

    rewrite_jsonl(folder / "session.jsonl", tmp_path / "session.jsonl", route)
    shutil.copyfile(folder / "stdout.log", tmp_path / "stdout.log")
    adapter = GeminiHarness(task, Provider(), None, "high", STALL_S)
    metrics = adapter.parse_session(captured(tmp_path))
    parts = metrics.per_model

    assert sorted(parts) == [FLASH, "gemini-2.5-pro"]
    assert all(p.reasoning_tokens and p.total_tokens and p.cost_usd for p in parts.values())
    assert summed(list(parts.values())) == totals(metrics).model_dump(exclude={"cost_usd"})
    assert sum(p.cost_usd or 0 for p in parts.values()) == pytest.approx(metrics.cost_usd, abs=1e-6)
    assert metrics.complete and NO_CACHE_WRITE_GAP in metrics.gaps


def test_gemini_stream_alone_gives_the_stats_table_per_model(tmp_path: Path) -> None:
    """Without a session, the `result` stats' table per model (`models`) gives the entries, read
    as the stats' totals are: they sum to the totals."""
    pro = {"total_tokens": 12000, "input_tokens": 11200, "output_tokens": 600, "cached": 4000, "input": 7200}
    flash = {"total_tokens": 7200, "input_tokens": 6800, "output_tokens": 360, "cached": 2000, "input": 4800}

    def split(entry: dict) -> dict:
        if entry.get("type") == "result":
            entry["stats"]["models"] = {"gemini-2.5-pro": pro, FLASH: flash}
        return entry

    rewrite_jsonl(DATA / "gemini" / "success" / "stdout.log", tmp_path / "stdout.log", split)
    metrics = parse_files(None, tmp_path / "stdout.log")

    assert metrics.per_model == {
        "gemini-2.5-pro": ModelUsage(
            input_tokens=7200, output_tokens=600, cache_read_tokens=4000, total_tokens=12000
        ),
        FLASH: ModelUsage(input_tokens=4800, output_tokens=360, cache_read_tokens=2000, total_tokens=7200),
    }
    assert summed(list(metrics.per_model.values())) == totals(metrics).model_dump(exclude={"cost_usd"})


def test_model_responses_without_a_model_name_record_the_gap(task: Task, tmp_path: Path) -> None:
    """A Pi session that names no model: no entry can be keyed, so a gap says so; the totals are
    exact and the run still counts (complete)."""
    folder = DATA / "pi" / "success"

    def anonymous(entry: dict) -> dict | None:
        if entry.get("type") == "model_change":
            return None
        message = entry.get("message")
        if isinstance(message, dict):
            message.pop("provider", None)
            message.pop("model", None)
        return entry

    rewrite_jsonl(folder / "session.jsonl", tmp_path / "session.jsonl", anonymous)
    rewrite_jsonl(folder / "stdout.log", tmp_path / "stdout.log", anonymous)
    adapter = PiHarness(task, Provider(), None, "high", STALL_S)
    metrics = adapter.parse_session(captured(tmp_path))

    assert metrics.model is None and metrics.assistant_messages and metrics.total_tokens
    assert metrics.per_model == {} and NO_MODEL_GAP in metrics.gaps and metrics.complete


def test_fill_per_model_keeps_what_a_parser_split_and_leaves_a_run_without_responses() -> None:
    split = Metrics(model="a", total_tokens=3, per_model={"a": ModelUsage(total_tokens=1), "b": ModelUsage()})
    assert fill_per_model(split.model_copy(deep=True)) == split
    assert fill_per_model(Metrics(model="a")) == Metrics(model="a")
    assert fill_per_model(Metrics()) == Metrics()
    # Tokens without a counted response (a stream's totals alone) are a model response too.
    assert fill_per_model(Metrics(input_tokens=5)).gaps == [NO_MODEL_GAP]
