"""Context compactions: parsed from each harness's session into the record's metrics, counted in the
report's behaviour table, the shipped compaction studies valid, and compactions driven offline
through the real CLI of every harness that declares how (`forced_compaction`) by the mock model,
whose ledger holds the summarization requests."""

import json
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from mock_ledger import ledger, parsed_tokens

from harnesses.claude_code import session as claude_code
from harnesses.claude_code.adapter import ClaudeCodeHarness
from harnesses.codex import session as codex
from harnesses.gemini.adapter import MOCK_TOOLS as GEMINI_TOOLS
from harnesses.mock_model.gemini import Gemini
from harnesses.mock_model.openai_chat import OpenAIChat
from harnesses.mock_model.policy import Policy, Step
from harnesses.mock_model.server import SUMMARY_MARKERS, SUMMARY_TEXT, Faults, MockModelServer, Usage
from harnesses.mock_model.session import LEDGER_FILE
from harnesses.opencode import session as opencode
from harnesses.pi.adapter import MOCK_TOOLS, NO_REASONING_GAP, PiHarness
from harnesses.pi.adapter import parse_files as parse_pi
from harnesses.registry import adapter_class, harness_names
from rig.experiment.load import load_experiment
from rig.paths import REPO_ROOT
from rig.schema import Condition, Metrics, Provider, RunRecord, Task
from rig.store.migrate import COMPACTION_FIELDS, migrate

DATA = Path(__file__).parent / "data"
PI = DATA / "pi"
CLAUDE_STUDY = REPO_ROOT / "experiments" / "claude_code_compaction.toml"
SMALL = DATA / "results_small" / "results_small"
OPENCODE = DATA / "opencode"
# What the mock reported in tests/data/opencode/compaction (see its README), and the real run below:
# a first response past the mock model's usable window (128,000 less OpenCode's output reserve),
# then every response and the summary small.
FILLING = {"input": 120000, "output": 100, "cache_read": 0}
SMALL_USAGE = {"input": 1000, "output": 100, "cache_read": 500}
# The usage of every response the mock served in tests/data/pi (see its README).
CAPTURED_TOTAL = 1000 + 100 + 500 + 40


def compaction(metrics: Metrics) -> tuple[int | None, ...]:
    return tuple(getattr(metrics, field) for field in COMPACTION_FIELDS)


def summaries(folder: Path) -> int:
    """The summarization requests (compactions) the mock answered, from `folder`'s ledger."""
    entries = json.loads((folder / LEDGER_FILE).read_text())["ledger"]
    return sum(e["outcome"] == "summary" for e in entries)


# --- the mock model: a summarization request gets a summary, apart from the agent's responses ----


def test_the_mock_answers_a_summarization_request_with_a_summary_outside_the_served_ledger():
    policy = Policy("one", (Step("shell", command="echo hi"), Step("final", text="Done.")))
    summarize = {
        "model": "mock-model",
        "stream": True,
        "messages": [
            {"role": "system", "content": f"{SUMMARY_MARKERS[0]} Do NOT continue the conversation."},
            {"role": "user", "content": "<conversation>[User]: go</conversation>"},
        ],
    }
    agent = {"model": "mock-model", "stream": True, "messages": [{"role": "user", "content": "go"}]}
    # The agent's first request fails; the summarization request is none of the agent's.
    faults = Faults(mode="http_error", status=500, first_n=1)
    with MockModelServer(policy, [OpenAIChat(MOCK_TOOLS)], usage=Usage(input=7), faults=faults) as server:
        for body in (summarize, agent, agent):
            request = urllib.request.Request(
                server.base_url + "/v1/chat/completions",
                json.dumps(body).encode(),
                {"Content-Type": "application/json"},
            )
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    answers = response.read().decode()
            except urllib.error.HTTPError as exc:
                answers = str(exc.code)
            if body is summarize:
                assert json.dumps(SUMMARY_TEXT)[1:-1] in answers and '"bash"' not in answers
        assert [(e.outcome, e.step_kind) for e in server.ledger] == [
            ("summary", "final"),
            ("http_error", None),
            ("served", "shell"),
        ]
        assert server.ledger[0].usage == Usage(input=7)
        assert server.totals()["responses"] == 1


def test_the_mock_answers_gemini_clis_compression_request_with_a_summary():
    policy = Policy("one", (Step("shell", command="echo hi"), Step("final", text="Done.")))
    # Gemini CLI 0.61.0 compresses through a non-streamed generateContent whose system instruction
    # is its compression prompt (chatCompressionService.js).
    compress = {
        "systemInstruction": {"parts": [{"text": f"\n{SUMMARY_MARKERS[3]} <state_snapshot>."}]},
        "contents": [{"role": "user", "parts": [{"text": "go"}]}],
    }
    with MockModelServer(policy, [Gemini(GEMINI_TOOLS)], usage=Usage(input=7)) as server:
        request = urllib.request.Request(
            server.base_url + "/v1beta/models/gemini-2.5-pro:generateContent",
            json.dumps(compress).encode(),
            {"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            answer = json.loads(response.read())
        assert answer["candidates"][0]["content"]["parts"] == [{"text": SUMMARY_TEXT}]
        assert [(e.outcome, e.usage) for e in server.ledger] == [("summary", Usage(input=7))]


def test_the_mock_reports_its_later_usage_after_the_first_response():
    policy = Policy("two", (Step("shell", command="echo hi"), Step("final", text="Done.")))
    summarize = {"messages": [{"role": "system", "content": SUMMARY_MARKERS[2]}]}
    agent = {"messages": [{"role": "user", "content": "go"}]}
    with MockModelServer(
        policy, [OpenAIChat(MOCK_TOOLS)], usage=Usage(input=9), later_usage=Usage(input=1)
    ) as server:
        for body in (agent, summarize, agent):
            request = urllib.request.Request(
                server.base_url + "/v1/chat/completions",
                json.dumps({"model": "mock-model", "stream": True, **body}).encode(),
                {"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=10) as response:
                response.read()
        assert [(e.outcome, e.usage.input) for e in server.ledger] == [
            ("served", 9),
            ("summary", 1),
            ("served", 1),
        ]


# --- Pi: the session's `compaction` entries ------------------------------------------------------


def test_pi_records_each_compaction_but_not_what_its_summary_cost():
    folder = PI / "compaction"
    metrics = parse_pi(folder / "session.jsonl", folder / "stdout.log")

    # One compaction, after the final answer, with the context Pi estimated before it (the last
    # response's usage); nothing after it, and no usage of its summarization request.
    assert compaction(metrics) == (1, CAPTURED_TOTAL, None, None)
    assert summaries(folder) == 1
    assert metrics.stop_reasons == ["toolUse", "stop"]
    # The mock served the summary with usage, which Pi dropped: the totals are the agent's alone.
    totals, _ = ledger(folder)
    assert parsed_tokens(metrics) == totals
    assert not metrics.complete
    [gap, reasoning] = metrics.gaps
    assert gap.startswith("1 compaction(s): Pi records no usage for its summarization requests")
    assert reasoning == NO_REASONING_GAP


def test_pi_stream_shows_a_compaction_only_begun():
    # In `pi -p` the stream closes before the compaction ends: alone, it shows a request whose
    # outcome nobody recorded.
    metrics = parse_pi(None, PI / "compaction" / "stdout.log")
    assert compaction(metrics) == (0, 0, 0, 0)
    assert metrics.gaps == [
        "1 compaction(s) started and never recorded: their usage is unknown",
        NO_REASONING_GAP,
    ]


def test_pi_run_without_compaction_counts_zero():
    metrics = parse_pi(PI / "success" / "session.jsonl", PI / "success" / "stdout.log")
    assert compaction(metrics) == (0, 0, 0, 0)
    assert metrics.complete


# --- Claude Code: compact_boundary system messages -----------------------------------------------


def with_lines(source: Path, target: Path, lines: list[dict]) -> Path:
    """`source` copied to `target` with `lines` appended as JSON."""
    target.write_text(source.read_text() + "".join(json.dumps(line) + "\n" for line in lines))
    return target


def test_claude_code_counts_each_boundary_once_with_tokens_before_and_after(tmp_path):
    folder = DATA / "claude_code" / "success"
    command = json.loads((folder / "command.json").read_text())
    plain = claude_code.parse_files(folder / "stdout.log", folder / "session.jsonl", command)
    assert compaction(plain) == (0, 0, 0, 0)

    # Constructed: 2.1.332 writes the same boundary to the stream (snake_case) and the transcript.
    stream_boundary = {
        "type": "system",
        "subtype": "compact_boundary",
        "compact_metadata": {"trigger": "auto", "pre_tokens": 95000, "post_tokens": 12000},
    }
    transcript_boundary = {
        "type": "system",
        "subtype": "compact_boundary",
        "compactMetadata": {"trigger": "auto", "preTokens": 95000, "postTokens": 12000},
    }
    manual = {
        "type": "system",
        "subtype": "compact_boundary",
        "compactMetadata": {"trigger": "manual", "preTokens": 50000},
    }
    stream = with_lines(folder / "stdout.log", tmp_path / "stdout.log", [stream_boundary])
    transcript = with_lines(folder / "session.jsonl", tmp_path / "session.jsonl", [transcript_boundary])
    both = claude_code.parse_files(stream, transcript, command)
    assert compaction(both) == (1, 95000, 12000, None)
    # The rest of the metrics are the run's as before: the summary's usage is in Claude Code's totals.
    assert both.model_dump(exclude=set(COMPACTION_FIELDS)) == plain.model_dump(exclude=set(COMPACTION_FIELDS))
    assert compaction(claude_code.parse_files(stream, None, command)) == (1, 95000, 12000, None)
    # A boundary without post_tokens leaves the sum after unknown.
    two = with_lines(folder / "session.jsonl", tmp_path / "two.jsonl", [transcript_boundary, manual])
    assert compaction(claude_code.parse_files(stream, two, command)) == (2, 145000, None, None)


# --- OpenCode: `compaction` parts answered by `summary` messages ----------------------------------


def test_opencode_counts_each_summary_with_its_tokens_and_the_context_it_compacted():
    folder = OPENCODE / "compaction"
    metrics = opencode.parse_files(folder / "session.json", folder / "stdout.log")
    # The compacted context is the first response's total, which OpenCode found past its window;
    # the summary's tokens are its own message's.
    first = FILLING["input"] + FILLING["output"] + FILLING["cache_read"]
    summary = sum(SMALL_USAGE.values())
    assert compaction(metrics) == (1, first, None, summary)
    assert summaries(folder) == 1
    # OpenCode counts the summary in its totals (and cost), but it is no response of the agent's.
    totals, _ = ledger(folder, ("input", "output", "cache_read"))
    assert metrics.assistant_messages == totals["responses"]
    assert metrics.total_tokens == first + (totals["responses"] - 1) * summary + summary
    assert metrics.input_tokens == totals["input"] + SMALL_USAGE["input"]
    assert metrics.stop_reasons == ["tool-calls", "tool-calls", "tool-calls", "stop"]
    assert metrics.final_text == "Done: the change is applied and checked."
    assert metrics.complete
    # The event stream does not tell a summary apart: without the session, unknown.
    assert compaction(opencode.parse_files(None, folder / "stdout.log")) == (None, None, None, None)


def test_opencode_counts_no_unfinished_compaction_and_zero_without_one(tmp_path):
    plain = opencode.parse_files(OPENCODE / "success" / "session.json", OPENCODE / "success" / "stdout.log")
    assert compaction(plain) == (0, 0, 0, 0)
    # A compaction part whose summary never finished (the run was killed during it).
    export = json.loads((OPENCODE / "compaction" / "session.json").read_text())
    for message in export["messages"]:
        if message["info"].get("summary"):
            del message["info"]["finish"]
    session = tmp_path / "session.json"
    session.write_text(json.dumps(export))
    metrics = opencode.parse_files(session, None)
    assert compaction(metrics) == (0, 0, 0, 0)
    assert "1 compaction(s) started and never finished: their usage is unknown" in metrics.gaps


# --- Codex: `compacted` rollout items ------------------------------------------------------------


def test_codex_counts_compacted_items_and_nothing_without_a_rollout(tmp_path):
    folder = DATA / "codex" / "success"
    plain = codex.parse_files(folder / "session.jsonl", folder / "stdout.log")
    assert compaction(plain) == (0, 0, 0, 0)
    # Constructed in the shape 0.171 writes (seen offline against the mock): a `compacted` item
    # naming the summarization response and repeating its token_usage_record, and (older versions)
    # a `context_compacted` event.
    usage = {"input_tokens": 25000, "cached_input_tokens": 0, "output_tokens": 100, "total_tokens": 25100}
    compacted = {
        "message": "summary",
        "compaction_response_id": "resp-7",
        "latest_token_usage_record": {"response_id": "resp-7", "usage": usage},
    }
    event = {"type": "event_msg", "payload": {"type": "context_compacted"}}
    rollout = with_lines(
        folder / "session.jsonl", tmp_path / "r1.jsonl", [{"type": "compacted", "payload": compacted}]
    )
    metrics = codex.parse_files(rollout, folder / "stdout.log")
    assert compaction(metrics) == (1, None, None, 25100)
    # Its usage is the record's, already counted: no gap, the same totals.
    assert metrics.complete == plain.complete and metrics.gaps == plain.gaps
    assert metrics.total_tokens == plain.total_tokens
    # An item that does not name its response, or events alone, leave the tokens unknown.
    older = [{"type": "compacted", "payload": {"message": "summary"}}, event, event]
    rollout = with_lines(folder / "session.jsonl", tmp_path / "r2.jsonl", older)
    assert compaction(codex.parse_files(rollout, folder / "stdout.log")) == (2, None, None, None)
    # The exec stream records no compaction: without the rollout, unknown.
    assert compaction(codex.parse_files(None, folder / "stdout.log")) == (None, None, None, None)


# --- the record and the report -------------------------------------------------------------------


def test_older_records_migrate_with_compactions_unknown():
    record = json.loads(SMALL.joinpath("runs.jsonl").read_text().splitlines()[0])
    migrated = migrate(record)
    assert all(migrated["metrics"][field] is None for field in COMPACTION_FIELDS)
    RunRecord.model_validate(migrated)


@pytest.mark.slow
def test_the_report_counts_compactions_per_condition(tmp_path):
    from rig.report.report import build_report

    folder = tmp_path / "results_small"
    shutil.copytree(SMALL, folder)
    lines, seen = [], 0
    for line in (folder / "runs.jsonl").read_text().splitlines():
        record = json.loads(line)
        # The agents_md runs' harness records compactions (three runs had one, one had two); the
        # no_agents_md runs' does not.
        if record["condition"] == "agents_md":
            record["metrics"]["compactions"] = [1, 1, 1, 2][seen] if seen < 4 else 0
            seen += 1
        lines.append(json.dumps(record))
    (folder / "runs.jsonl").write_text("\n".join(lines) + "\n")
    build_report([folder], tmp_path / "out")

    text = (tmp_path / "out" / "report.md").read_text().splitlines()
    header = next(line for line in text if "compactions (mean per run, runs with ≥ 1)" in line)
    rows = {
        line.split("|")[1].strip(): dict(zip(header.split("|"), line.split("|"), strict=True))
        for line in text
        if line.startswith("| `") and line.count("|") == header.count("|")
    }
    column = " compactions (mean per run, runs with ≥ 1) "
    assert rows["`agents_md`"][column].strip() == "mean 0.33, 27% (4/15)"
    assert rows["`no_agents_md`"][column].strip() == "—"


# --- the studies -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "settings"),
    [
        (
            "pi_compaction",
            {
                "default": {},
                "forced": {
                    "compaction": {"enabled": True, "reserveTokens": 190000, "keepRecentTokens": 2000}
                },
            },
        ),
        (
            "pi_compaction_thresholds",
            {
                "early": {"compaction": {"reserveTokens": 190000, "keepRecentTokens": 2000}},
                "late": {"compaction": {"reserveTokens": 150000, "keepRecentTokens": 20000}},
            },
        ),
        (
            "claude_code_compaction",
            {
                "off": {"autoCompactEnabled": False},
                "earliest": {"autoCompactEnabled": True, "autoCompactWindow": 100000},
            },
        ),
        (
            "claude_code_compaction_thresholds",
            {"window_100k": {"autoCompactWindow": 100000}, "window_150k": {"autoCompactWindow": 150000}},
        ),
        ("codex_compaction", {"default": {}, "forced": {"model_auto_compact_token_limit": 20000}}),
        (
            "codex_compaction_thresholds",
            {
                "limit_20k": {"model_auto_compact_token_limit": 20000},
                "limit_60k": {"model_auto_compact_token_limit": 60000},
            },
        ),
    ],
)
def test_the_compaction_studies_load_and_differ_only_in_settings(config, settings):
    # load_experiment checks each condition's settings against the keys its adapter takes.
    experiment = load_experiment(REPO_ROOT / "experiments" / f"{config}.toml")
    assert {c.name: c.harness_settings for c in experiment.conditions} == settings
    assert all(not c.harness_args and c.append_system_prompt is None for c in experiment.conditions)


# --- the real Pi CLI compacting against the mock model -------------------------------------------


@pytest.fixture(scope="module")
def pi_study() -> dict:
    return {c.name: c for c in load_experiment(REPO_ROOT / "experiments" / "pi_compaction.toml").conditions}


@pytest.mark.slow
@pytest.mark.parametrize(("arm", "expected"), [("forced", 1), ("default", 0)])
def test_pi_compacts_offline_when_the_study_forces_it(
    arm, expected, pi_study, workspace, task: Task, tmp_path
):
    # The study's arm as it is, against the mock model (a 128,000-token window): the forced arm's
    # reserve leaves no room, the default arm's (Pi's 16,384) never fills with the mock's usage.
    pi = PiHarness(task, Provider(), None, "high", 30.0)
    run_dir = tmp_path / "run"
    run = pi.run(workspace, task.spec.prompt, pi_study[arm], run_dir, 120)
    metrics = pi.parse_session(run)

    assert run.exit_code == 0 and not run.timed_out
    assert metrics.compactions == summaries(run_dir) == expected
    totals, _ = ledger(run_dir)
    assert parsed_tokens(metrics) == totals
    assert metrics.complete == (expected == 0)
    if expected:
        # Pi estimates the context before it from the final response's usage: the mock's.
        usage = json.loads((run_dir / LEDGER_FILE).read_text())["ledger"][-2]["usage"]
        assert metrics.compaction_tokens_before == sum(
            usage[k] for k in ("input", "output", "cache_read", "cache_write")
        )
        assert metrics.stop_reasons[-1] == "stop"
    else:
        assert compaction(metrics) == (0, 0, 0, 0)


# --- the real Claude Code CLI compacting against the mock model ----------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("arm", "expected"), [("earliest", 3), ("off", 0)])
def test_claude_code_compacts_offline_as_the_study_sets_it(arm, expected, workspace, task: Task, tmp_path):
    # Every response reports 95,000 tokens of input: past the earliest window (100,000 less Claude
    # Code's reserve) after the second response. Each compaction leaves the mock at an earlier step
    # of its policy, so the context refills at once: after the third, Claude Code's breaker stops
    # the run (`autocompact_thrashing`, its own stop, not the provider's failure).
    [condition] = [c for c in load_experiment(CLAUDE_STUDY).conditions if c.name == arm]
    usage = {"input": 95000, "output": 100, "cache_read": 0}
    condition = condition.model_copy(update={"harness_options": {"mock_usage": usage}})
    harness = ClaudeCodeHarness(task, Provider(), None, None, 30.0)
    run_dir = tmp_path / "run"
    run = harness.run(workspace, task.spec.prompt, condition, run_dir, 120)
    metrics = harness.parse_session(run)

    assert metrics.compactions == summaries(run_dir) == expected
    # Claude Code counts its summarization requests in its totals: the mock's every answer.
    entries = json.loads((run_dir / LEDGER_FILE).read_text())["ledger"]
    assert metrics.input_tokens == 95000 * len(entries)
    served = sum(e["outcome"] == "served" for e in entries)
    assert harness.infra_signature(run, metrics) is None
    if expected:
        # The parser counts the <synthetic> message holding the breaker's text as a response.
        assert metrics.assistant_messages == served + 1
        assert metrics.compaction_tokens_before >= expected * 95000
        assert 0 < metrics.compaction_tokens_after < metrics.compaction_tokens_before
        assert metrics.compaction_tokens is None
        assert any("Autocompact is thrashing" in m for m in metrics.error_messages)
    else:
        assert run.exit_code == 0 and compaction(metrics) == (0, 0, 0, 0)
        assert metrics.assistant_messages == served


# --- every harness that declares how, compacting against the mock model -------------------------

FORCING = [name for name in harness_names() if adapter_class(name).forced_compaction is not None]


def test_every_harness_that_reads_compactions_forces_one_offline_or_says_why():
    for name in harness_names():
        cls = adapter_class(name)
        if "compactions" in cls.compaction_fields:
            assert cls.forced_compaction is not None or cls.lacks.get("forced_compaction"), name
    assert FORCING, "no harness declares a forced compaction"


@pytest.mark.slow
@pytest.mark.parametrize("name", FORCING)
def test_a_forced_compaction_is_counted_with_its_tokens(name, workspace, task: Task, tmp_path):
    """The adapter's `forced_compaction`, through its real CLI: the compactions it parses are the
    summarization requests the mock answered, and every compaction figure it declares is read."""
    cls = adapter_class(name)
    # The declared fields make the condition, as calibration makes its silent_after_final one.
    condition = Condition(name="forced", **cls.forced_compaction)
    harness = cls(task, Provider(), None, None, 30.0)
    run_dir = tmp_path / "run"
    run = harness.run(workspace, task.spec.prompt, condition, run_dir, 120)
    metrics = harness.parse_session(run)

    assert not run.timed_out and harness.infra_signature(run, metrics) is None
    assert metrics.compactions == summaries(run_dir) >= 1
    entries = json.loads((run_dir / LEDGER_FILE).read_text())["ledger"]
    for field in cls.compaction_fields - {"compactions"}:
        assert getattr(metrics, field), (field, compaction(metrics))
    if "compaction_tokens" in cls.compaction_fields:
        # What the summarization requests cost, as the mock served them.
        answered = [e["usage"] for e in entries if e["outcome"] == "summary"]
        assert metrics.compaction_tokens == sum(u["input"] + u["output"] + u["cache_read"] for u in answered)
