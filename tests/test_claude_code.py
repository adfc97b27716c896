"""The Claude Code adapter: parsing captured sessions, and the real CLI driven by the mock model."""

import json
import os
import shutil
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from builtin_pack import BUILTIN
from conftest import run_check_json
from mock_ledger import captured_patch_command

from harnesses.claude_code.adapter import (
    INFRA_SIGNATURE,
    MOCK_TOOLS,
    ClaudeCodeHarness,
    context_mapping,
    sent_thinking,
    thinking_args,
)
from harnesses.claude_code.session import NO_THINKING_GAP, parse_files
from harnesses.cli_harness import install_skill
from harnesses.mock_model.anthropic_messages import SIDE_TURN, AnthropicMessages
from harnesses.mock_model.policy import Policy, Step
from harnesses.mock_model.server import SIDE_TEXT, Faults, MockModelServer, Usage
from harnesses.mock_model.session import LEDGER_FILE
from rig.schema import AgentRun, Condition, Metrics, ModelUsage, Provider, Task
from rig.session.shell import judge
from rig.verify.classify import classify
from rig.workspace.build import tree_digest

DATA = Path(__file__).parent / "data" / "claude_code"
# Captured with Claude Code 2.1.197: runs stored by the rig before the upgrade must still re-parse.
OLD = DATA / "2.1.197"
USAGE_KEYS = ("input", "output", "cache_read", "cache_write", "reasoning")
# A line of the fixture's AGENTS.md that no other context file holds.
AGENTS_MARK = "Endpoints need three pieces"
SKILL = "tasks/t5_migration/skill"
SKILL_NAME = "taskapp-migration"
SOLUTION_USAGE = {"input": 1000, "output": 100, "cache_read": 500, "cache_write": 30, "reasoning": 20}
CHECK_COMMAND = "python scripts/check.py"


def saved_run(folder: Path, *, stdout: bool = True, transcript: bool = True) -> AgentRun:
    """An AgentRun pointing at captured files, as `rig reclassify` rebuilds one from a record."""
    return AgentRun(
        command=json.loads((folder / "command.json").read_text()),
        exit_code=0,
        timed_out=False,
        stalled=False,
        wall_s=1.0,
        session_path=folder / "session.jsonl" if transcript else None,
        stdout_path=folder / "stdout.log" if stdout else folder / "missing.log",
        stderr_path=folder / "stderr.log",
    )


def ledger(run_dir: Path) -> tuple[dict[str, int], dict[str, int]]:
    """Usage totals and tool calls of the main conversation, from the mock's saved ledger."""
    entries = json.loads((run_dir / LEDGER_FILE).read_text())["ledger"]
    # Side requests are recorded as such ("side"), never as "served".
    served = [e for e in entries if e["outcome"] == "served"]
    totals = {key: sum(e["usage"][key] for e in served) for key in USAGE_KEYS}
    tools: dict[str, int] = {}
    for entry in served:
        if entry["tool"]:
            tools[entry["tool"]] = tools.get(entry["tool"], 0) + 1
    return totals, tools


def parsed_usage(metrics: Metrics) -> dict[str, int]:
    return {
        "input": metrics.input_tokens,
        "output": metrics.output_tokens,
        "cache_read": metrics.cache_read_tokens,
        "cache_write": metrics.cache_write_tokens,
        "reasoning": metrics.reasoning_tokens,
    }


# --- captured sessions ------------------------------------------------------------------------


def expected_success(patch: str, **changes: object) -> Metrics:
    """The metrics of the captured `success` run; the versions differ only in what `changes` says."""
    metrics = Metrics(
        model="claude-opus-5-5",
        thinking_level="medium",
        assistant_messages=4,
        tool_calls=3,
        tool_calls_by_name={"Read": 1, "Bash": 2},
        tool_errors=0,
        input_tokens=4000,
        output_tokens=400,
        cache_read_tokens=2000,
        cache_write_tokens=120,
        # 20 per response, inside output_tokens (so not in the total).
        reasoning_tokens=80,
        total_tokens=6520,
        cost_usd=0.025,
        cost_source="harness",
        stop_reasons=["tool_use", "tool_use", "tool_use", "end_turn"],
        error_messages=[],
        transport_failures=0,
        bash_commands=[
            captured_patch_command(patch),
            CHECK_COMMAND,
        ],
        bash_search_commands=[],
        read_paths=["README.md"],
        read_attempts=["<RUNS>/success/work/README.md"],
        ran_pytest=False,
        read_skill=False,
        final_text="Done: the change is applied and checked.",
        per_model={"claude-opus-5-5": ModelUsage(**MAIN_USAGE)},
        compactions=0,
        compaction_tokens_before=0,
        compaction_tokens_after=0,
        compaction_tokens=0,
    )
    return metrics.model_copy(update=changes)


# The one model of the captured runs, as the result's modelUsage gives it.
MAIN_USAGE = {
    "input_tokens": 4000,
    "output_tokens": 400,
    "cache_read_tokens": 2000,
    "cache_write_tokens": 120,
    "reasoning_tokens": 80,
    "total_tokens": 6520,
    "cost_usd": 0.025,
}
# 2.1.197 had another default model (priced differently, named with its context window in
# modelUsage) and records no thinking tokens (the mock served none then): a gap, not a zero.
OLD_SUCCESS = {
    "model": "claude-opus-4-8",
    "reasoning_tokens": 0,
    "complete": True,
    "gaps": [NO_THINKING_GAP],
    "cost_usd": 0.03175,
    "per_model": {
        "claude-opus-4-8[1m]": ModelUsage(**MAIN_USAGE | {"reasoning_tokens": 0, "cost_usd": 0.03175})
    },
}


# Each captured version and its default model, as its modelUsage names it.
VERSION_MODELS = {
    "2.0.61": "claude-sonnet-4-5-20250929",
    "2.1.163": "claude-opus-4-8[1m]",
    "2.1.332": "claude-opus-5-5",
}


@pytest.mark.parametrize("version", VERSION_MODELS)
def test_versions_reproduce_the_mock_ledger(version):
    """Every Claude Code version's files give the mock's ledger: tokens per model from the result's
    `modelUsage`, responses and tool calls from the stream. Versions before 2.1.332 record no
    thinking count: reasoning stays 0 and the record says so in its gaps, while its totals and cost,
    exact, keep it complete. 2.0.61's subagent
    warmups (haiku and the main model) are side requests: they show in modelUsage with no tokens."""
    folder = DATA / "versions" / version
    assert json.loads((folder / "version.json").read_text())["claude-code"] == version
    metrics = parse_files(folder / "stdout.log", folder / "session.jsonl", [])
    totals, tools = ledger(folder)
    parsed = parsed_usage(metrics)
    if version == "2.1.332":
        assert metrics.complete and metrics.gaps == []
    else:
        assert parsed.pop("reasoning") == 0 and totals.pop("reasoning") == 7 * 20
        assert metrics.complete and metrics.gaps == [NO_THINKING_GAP]
    assert parsed == totals
    served = [e for e in json.loads((folder / LEDGER_FILE).read_text())["ledger"] if e["outcome"] == "served"]
    assert metrics.assistant_messages == len(served) == 7 and metrics.tool_calls_by_name == tools
    assert tools == {"Read": 1, "Bash": 4, "Write": 1} and metrics.tool_errors == 1
    main = {m: u for m, u in metrics.per_model.items() if u.total_tokens}
    assert list(main) == [VERSION_MODELS[version]]
    assert main[VERSION_MODELS[version]].input_tokens == totals["input"]
    assert metrics.final_text == "Fixed: has_next now compares with <."


def test_a_subagent_warmup_is_a_side_request():
    """Claude Code 2.0 to early 2.1 warms its subagents' caches with a request that has tools and a
    working directory but one message ending in `Warmup`: no turn of the conversation."""
    protocol = AnthropicMessages(MOCK_TOOLS)
    system = [{"type": "text", "text": "You are Claude Code.\nWorking directory: /work"}]
    tools = [{"name": "Read", "input_schema": {}}]
    warmup = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "<context>"}, {"type": "text", "text": "Warmup"}],
        }
    ]
    prompt = [{"role": "user", "content": [{"type": "text", "text": "Fix the bug."}]}]
    assert protocol.is_side_request({"system": system, "tools": tools, "messages": warmup})
    assert not protocol.is_side_request({"system": system, "tools": tools, "messages": prompt})


def test_usage_of_every_model_is_counted_and_sums_to_the_totals(tmp_path):
    """The result's `usage` counts the main model only, its cost every model: tokens come per
    model from `modelUsage`, and the totals are the sums of the parts."""
    stream = [json.loads(line) for line in (DATA / "success" / "stdout.log").read_text().splitlines()]
    result = stream[-1]
    assert result["type"] == "result"
    side = {
        "inputTokens": 900,
        "outputTokens": 60,
        "cacheReadInputTokens": 0,
        "cacheCreationInputTokens": 0,
        "costUSD": 0.0012,
    }
    result["modelUsage"] = {
        "claude-opus-5-5": result["modelUsage"]["claude-opus-5-5"],
        "claude-haiku-4-5": side,
    }
    result["total_cost_usd"] = 0.0262
    (tmp_path / "stdout.log").write_text("".join(json.dumps(e) + "\n" for e in stream))
    metrics = parse_files(tmp_path / "stdout.log", DATA / "success" / "session.jsonl", [])

    assert metrics.per_model == {
        "claude-opus-5-5": ModelUsage(**MAIN_USAGE),
        "claude-haiku-4-5": ModelUsage(input_tokens=900, output_tokens=60, total_tokens=960, cost_usd=0.0012),
    }
    parts = metrics.per_model.values()
    for key in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "total_tokens"):
        assert getattr(metrics, key) == sum(getattr(part, key) for part in parts), key
    assert metrics.total_tokens == 6520 + 960 and metrics.cost_usd == pytest.approx(0.0262)
    assert metrics.model == "claude-opus-5-5" and metrics.complete


@pytest.mark.parametrize(("folder", "changes"), [(DATA, {}), (OLD, OLD_SUCCESS)], ids=["2.1.332", "2.1.197"])
def test_success_session_parses_to_exact_metrics(task, folder, changes):
    harness = ClaudeCodeHarness(task, Provider(), None, None, 30)
    run = saved_run(folder / "success")
    metrics = harness.parse_session(run)

    assert metrics == expected_success(task.solution_patch.read_text(), **changes)
    # Docs, gate and tests are the pack's to judge: the parser leaves them unset.
    judged = judge(metrics, BUILTIN.spec)
    assert judged.docs_read == ["README.md"] and judged.ran_check_script and not judged.ran_tests
    assert harness.infra_signature(run, metrics) is None
    assert not classify(run, metrics, None, 30).is_infra
    # What Claude Code reported equals what the mock served.
    totals, tools = ledger(folder / "success")
    assert parsed_usage(metrics) == totals
    assert metrics.tool_calls_by_name == tools


@pytest.mark.parametrize(
    ("folder", "model"), [(DATA, "claude-opus-5-5"), (OLD, "claude-opus-4-8[1m]")], ids=["2.1.332", "2.1.197"]
)
def test_api_error_session_is_an_infrastructure_failure(task, folder, model):
    harness = ClaudeCodeHarness(task, Provider(), None, None, 30)
    run = saved_run(folder / "api_error").model_copy(update={"exit_code": 1})
    metrics = harness.parse_session(run)

    assert metrics.assistant_messages == 1 and metrics.tool_calls == 0
    assert metrics.stop_reasons == ["error"]
    assert metrics.transport_failures == 1
    assert len(metrics.error_messages) == 1
    assert metrics.error_messages[0].startswith("API Error: 500 mock provider error (HTTP 500).")
    assert metrics.total_tokens == 0 and metrics.cost_usd == 0.0 and metrics.cost_source == "harness"
    assert metrics.final_text is None
    # No real response: the model named is the one Claude Code was started with.
    assert metrics.model == model
    assert harness.infra_signature(run, metrics) == INFRA_SIGNATURE
    verdict = classify(run, metrics, harness.infra_signature(run, metrics), 30)
    assert verdict.is_infra and verdict.rule == INFRA_SIGNATURE


@pytest.mark.parametrize("folder", [DATA, OLD], ids=["2.1.332", "2.1.197"])
def test_retried_request_counts_as_a_transport_failure_of_a_scored_run(task, folder):
    harness = ClaudeCodeHarness(task, Provider(), None, None, 30)
    run = saved_run(folder / "retry")
    metrics = harness.parse_session(run)

    assert metrics.transport_failures == 1
    assert metrics.error_messages == ["retry 1/1: overloaded (HTTP 529)"]
    assert metrics.tool_calls_by_name == {"Read": 1}
    assert metrics.final_text == "Nothing to change."
    assert harness.infra_signature(run, metrics) is None
    totals, tools = ledger(folder / "retry")
    assert parsed_usage(metrics) == totals and metrics.tool_calls_by_name == tools


def test_an_api_error_message_is_known_by_its_flag_alone(task, tmp_path):
    """2.1.332 flags an API-error message in the stream (`is_api_error_message`): a reworded error
    text or another model name does not hide a provider failure the conversation ended with."""
    lines = []
    for line in (DATA / "api_error" / "stdout.log").read_text().splitlines():
        event = json.loads(line)
        if event["type"] == "assistant":
            event.pop("error")
            event["message"]["model"] = "claude-opus-5-5"
            event["message"]["content"] = [{"type": "text", "text": "Provider unavailable."}]
        if event["type"] == "result":
            event.update(subtype="error_during_execution")
        lines.append(json.dumps(event) + "\n")
    stdout = tmp_path / "stdout.log"
    stdout.write_text("".join(lines))
    harness = ClaudeCodeHarness(task, Provider(), None, None, 30)
    run = saved_run(DATA / "api_error").model_copy(update={"stdout_path": stdout, "session_path": None})
    metrics = harness.parse_session(run)

    assert metrics.stop_reasons == ["error"] and metrics.transport_failures == 1
    assert harness.infra_signature(run, metrics) == INFRA_SIGNATURE


def test_an_api_error_recovered_from_is_counted_but_scored(task, tmp_path):
    """An API-error message the conversation went on from is a failed attempt, not the run's end."""
    error = [
        line
        for line in (DATA / "api_error" / "stdout.log").read_text().splitlines(keepends=True)
        if json.loads(line)["type"] == "assistant"
    ]
    success = (DATA / "success" / "stdout.log").read_text().splitlines(keepends=True)
    stdout = tmp_path / "stdout.log"
    stdout.write_text("".join([success[0], *error, *success[1:]]))
    harness = ClaudeCodeHarness(task, Provider(), None, None, 30)
    run = saved_run(DATA / "success").model_copy(update={"stdout_path": stdout, "session_path": None})
    metrics = harness.parse_session(run)

    assert metrics.transport_failures == 1
    assert metrics.stop_reasons == ["error", "tool_use", "tool_use", "tool_use", "end_turn"]
    assert harness.infra_signature(run, metrics) is None
    assert not classify(run, metrics, None, 30).is_infra


@pytest.mark.parametrize("folder", [DATA, OLD], ids=["2.1.332", "2.1.197"])
def test_either_file_alone_gives_the_same_counts(task, folder):
    folder = folder / "success"
    full = parse_files(folder / "stdout.log", folder / "session.jsonl", [])
    stream_only = parse_files(folder / "stdout.log", None, [])
    transcript_only = parse_files(None, folder / "session.jsonl", [])

    counted = ("tool_calls_by_name", "bash_commands", "read_paths", "stop_reasons", "assistant_messages")
    for partial in (stream_only, transcript_only):
        assert partial.model_dump(include=set(counted)) == full.model_dump(include=set(counted))
    assert parsed_usage(stream_only) == parsed_usage(full)
    # Without the result event, the transcript's final per-response usage gives the same totals.
    assert parsed_usage(transcript_only) == parsed_usage(full)
    assert transcript_only.cost_usd is None and transcript_only.final_text == full.final_text


def test_parse_is_a_pure_function_of_the_files(task, tmp_path):
    harness = ClaudeCodeHarness(task, Provider(), None, None, 30)
    original = harness.parse_session(saved_run(DATA / "success"))
    copy = Path(shutil.copytree(DATA / "success", tmp_path / "copy"))
    run = saved_run(copy)
    assert harness.parse_session(run) == original

    # A torn last line (the CLI killed mid-write) is skipped.
    for name in ("stdout.log", "session.jsonl"):
        with (copy / name).open("a") as handle:
            handle.write('{"type": "assistant", "message": {"id": "msg_')
    assert harness.parse_session(run) == original

    for name in ("stdout.log", "session.jsonl"):
        (copy / name).write_text("")
    assert harness.parse_session(run) == Metrics(thinking_level="medium")
    missing = run.model_copy(update={"session_path": None, "stdout_path": copy / "nope.log", "command": []})
    assert harness.parse_session(missing) == Metrics()
    assert harness.infra_signature(missing, Metrics()) is None


# --- condition mapping ------------------------------------------------------------------------


def test_agents_md_is_imported_from_the_config_dir(tmp_path):
    work, config = tmp_path / "work", tmp_path / "config"
    work.mkdir()
    config.mkdir()
    assert context_mapping(work, config) is None
    assert not (config / "CLAUDE.md").exists()

    (work / "AGENTS.md").write_text("rules\n")
    mapping = context_mapping(work, config)
    assert mapping == f"AGENTS.md imported via CLAUDE_CONFIG_DIR/CLAUDE.md (@{work.resolve()}/AGENTS.md)"
    assert (config / "CLAUDE.md").read_text() == f"@{work.resolve()}/AGENTS.md\n"
    assert sorted(p.name for p in work.iterdir()) == ["AGENTS.md"]

    other = tmp_path / "config2"
    other.mkdir()
    (work / "CLAUDE.md").write_text("own rules\n")
    assert context_mapping(work, other) == "CLAUDE.md read natively; AGENTS.md present but not imported"
    (work / "AGENTS.md").unlink()
    assert context_mapping(work, other) == "CLAUDE.md read natively"
    assert not (other / "CLAUDE.md").exists()


def test_skills_are_installed_under_their_declared_name(tmp_path):
    assert install_skill(SKILL, tmp_path / "skills").name == SKILL_NAME
    assert (tmp_path / "skills" / SKILL_NAME / "SKILL.md").is_file()
    with pytest.raises(ValueError, match="has no SKILL.md"):
        install_skill("tasks/t1_fix_pagination", tmp_path / "skills")


@pytest.mark.parametrize(
    ("level", "args"),
    [
        ("low", ["--effort", "low"]),
        ("max", ["--effort", "max"]),
        ("minimal", ["--effort", "low"]),
        ("off", ['--settings={"alwaysThinkingEnabled":false}']),
    ],
)
def test_thinking_levels_map_to_claude_options(level, args):
    assert thinking_args(level) == args


def test_the_transcript_tells_what_thinking_was_sent():
    # --effort medium on the default model: adaptive thinking on each of the four requests.
    assert sent_thinking(DATA / "success" / "session.jsonl") == ["adaptive"] * 4
    # 2.1.197 kept no record of its requests.
    assert sent_thinking(OLD / "success" / "session.jsonl") == []
    assert sent_thinking(None) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model", "kept"), [(None, True), ("claude-opus-4-8", False)], ids=["default_model", "opus_4_8"]
)
def test_thinking_off_is_recorded_as_kept_when_the_model_rejects_it(workspace, task, tmp_path, model, kept):
    """The default model of 2.1.332 cannot have thinking disabled: Claude Code sends adaptive thinking."""
    harness = ClaudeCodeHarness(task, Provider(kind="mock"), model, "off", 30)
    condition = Condition(name="test", harness_options={"mock_policy": "nothing"})
    run = harness.run(workspace, task.spec.prompt, condition, tmp_path / "run", 120)

    assert run.exit_code == 0 and harness.parse_session(run).thinking_level == "off"
    assert sent_thinking(run.session_path) == (["adaptive"] * 2 if kept else ["disabled"] * 2)
    assert harness.condition_mapping is not None
    assert (
        "thinking off not honoured: Claude Code sent thinking adaptive" in harness.condition_mapping
    ) is kept


def test_unknown_thinking_level_is_refused_before_running(task):
    with pytest.raises(ValueError, match="no thinking level 'turbo'"):
        ClaudeCodeHarness(task, Provider(), None, "turbo", 30)


# --- the wire protocol ------------------------------------------------------------------------


def sse_payloads(events: list[bytes]) -> list[dict]:
    payloads = []
    for event in events:
        lines = event.decode().strip().splitlines()
        assert lines[0] == f"event: {json.loads(lines[1][len('data: ') :])['type']}"
        payloads.append(json.loads(lines[1][len("data: ") :]))
    return payloads


MAIN_REQUEST = {
    "model": "claude-x",
    "stream": True,
    "system": [{"type": "text", "text": "env\n - Primary working directory: /w/ork\n"}],
    "tools": [{"name": "Bash"}],
    "messages": [
        {"role": "user", "content": "go"},
        {"role": "system", "content": "listing"},
        {"role": "assistant", "content": []},
        {"role": "user", "content": []},
    ],
}


def test_protocol_streams_a_tool_call_with_the_usage_given():
    protocol = AnthropicMessages(MOCK_TOOLS)
    assert protocol.turn(MAIN_REQUEST) == 1
    events = sse_payloads(
        protocol.events(Step("read", path="README.md"), Usage(11, 22, 33, 44, 5), MAIN_REQUEST, "r1")
    )

    assert [e["type"] for e in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[0]["message"]["usage"] == {
        "input_tokens": 11,
        "cache_creation_input_tokens": 44,
        "cache_read_input_tokens": 33,
        "output_tokens": 0,
    }
    assert events[1]["content_block"] == {"type": "tool_use", "id": "toolu_r1", "name": "Read", "input": {}}
    assert json.loads(events[2]["delta"]["partial_json"]) == {"file_path": "/w/ork/README.md"}
    assert events[4]["delta"]["stop_reason"] == "tool_use"
    assert events[4]["usage"] == {"output_tokens": 22, "output_tokens_details": {"thinking_tokens": 5}}
    assert protocol.tool_call(Step("shell", command="ls"), MAIN_REQUEST).name == "Bash"
    assert protocol.tool_call(Step("write", path="x", content="y"), MAIN_REQUEST).name == "Write"
    assert protocol.tool_call(Step("final", text="t"), MAIN_REQUEST) is None


def test_protocol_finds_the_working_directory_in_a_system_message():
    """Claude Code 2.1.332 states its environment in a system message, not in the system prompt."""
    request = {
        **MAIN_REQUEST,
        "system": [{"type": "text", "text": "You are a Claude agent."}],
        "messages": [
            {"role": "user", "content": "Working directory: /from/the/user"},
            {
                "role": "system",
                "content": [
                    {"type": "text", "text": "# Environment\n - Primary working directory: /w/ork\n"}
                ],
            },
        ],
    }
    protocol = AnthropicMessages(MOCK_TOOLS)
    call = protocol.tool_call(Step("read", path="README.md"), request)
    assert call is not None and call.arguments == {"file_path": "/w/ork/README.md"}
    # Without tools, a request that states no working directory is a side request; one that does is not.
    assert not protocol.is_side_request({**request, "tools": []})
    assert protocol.is_side_request({**request, "tools": [], "messages": request["messages"][:1]})


def test_protocol_answers_non_streaming_requests():
    protocol = AnthropicMessages(MOCK_TOOLS)
    plain = {**MAIN_REQUEST, "stream": False}
    assert protocol.content_type(plain) == "application/json"
    (body,) = protocol.events(Step("final", text="done"), Usage(1, 2, 3, 4, 0), plain, "r2")
    message = json.loads(body)
    assert message["content"] == [{"type": "text", "text": "done"}]
    assert message["stop_reason"] == "end_turn" and message["usage"]["output_tokens"] == 2
    assert protocol.error_body(529) == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "mock provider error (HTTP 529)"},
    }
    assert protocol.error_body(500)["error"]["type"] == "api_error"


SIDE_REQUEST = {
    "model": "claude-haiku",
    "stream": True,
    "system": "Summarise.",
    "messages": [{"role": "user"}],
}


def post_messages(url: str, body: dict) -> list[dict]:
    request = urllib.request.Request(
        f"{url}/v1/messages", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return [
            json.loads(line[len("data: ") :])
            for line in response.read().decode().splitlines()
            if line.startswith("data: ")
        ]


def test_side_requests_get_text_without_usage_and_stay_out_of_the_served_ledger():
    protocol = AnthropicMessages(MOCK_TOOLS)
    assert protocol.is_side_request(SIDE_REQUEST) and not protocol.is_side_request(MAIN_REQUEST)
    assert protocol.turn(SIDE_REQUEST) == SIDE_TURN
    policy = Policy("p", (Step("shell", command="rm -rf x"), Step("final", text="ok")))
    with MockModelServer(policy, protocols=[protocol]) as server:
        side = post_messages(server.base_url, SIDE_REQUEST)
        main = post_messages(server.base_url, {**MAIN_REQUEST, "messages": MAIN_REQUEST["messages"][:1]})
        assert server.tool_calls() == {"Bash": 1} and server.totals()["responses"] == 1

    assert side[2]["delta"] == {"type": "text_delta", "text": SIDE_TEXT}
    assert side[0]["message"]["usage"]["input_tokens"] == 0 and side[4]["usage"]["output_tokens"] == 0
    assert main[1]["content_block"]["name"] == "Bash"
    # The side request came first, yet the agent's first request got the policy's first step.
    assert [(e.outcome, e.turn, e.step_kind, e.usage) for e in server.ledger] == [
        ("side", SIDE_TURN, "final", Usage(0, 0, 0, 0, 0)),
        ("served", 0, "shell", Usage()),
    ]


def test_faults_on_the_first_requests_spare_side_requests():
    policy = Policy("p", (Step("final", text="ok"),))
    with MockModelServer(
        policy, protocols=[AnthropicMessages(MOCK_TOOLS)], faults=Faults("http_error", 529, first_n=1)
    ) as server:
        post_messages(server.base_url, SIDE_REQUEST)
        with pytest.raises(urllib.error.HTTPError):
            post_messages(server.base_url, MAIN_REQUEST)
        post_messages(server.base_url, MAIN_REQUEST)
    assert [e.outcome for e in server.ledger] == ["side", "http_error", "served"]


# --- the real CLI against the mock ------------------------------------------------------------


def run_claude(
    task: Task,
    workdir: Path,
    run_dir: Path,
    options: dict,
    *,
    stall_s: float = 30,
    provider: Provider | None = None,
    **condition: object,
) -> tuple[ClaudeCodeHarness, AgentRun, Metrics]:
    harness = ClaudeCodeHarness(task, provider or Provider(kind="mock"), None, None, stall_s)
    run = harness.run(
        workdir,
        task.spec.prompt,
        Condition(name="test", harness_options=options, **condition),
        run_dir,
        120,
    )
    return harness, run, harness.parse_session(run)


@pytest.mark.slow
def test_solution_replay_succeeds_and_matches_the_ledger(workspace, task, tmp_path):
    run_dir = tmp_path / "run" / "attempt-1"
    harness, run, metrics = run_claude(task, workspace, run_dir, {"mock_usage": SOLUTION_USAGE})

    assert run.exit_code == 0 and not run.timed_out and not run.stalled
    assert "Claude Code" in harness.version()
    code, report = run_check_json(workspace)
    assert code == 0 and report["ok"], report
    totals, tools = ledger(run_dir)
    assert totals == {key: 4 * value for key, value in SOLUTION_USAGE.items()}
    assert parsed_usage(metrics) == totals
    assert metrics.complete and metrics.model in metrics.per_model
    assert metrics.tool_calls_by_name == tools == {"Read": 1, "Bash": 2}
    judged = judge(metrics, BUILTIN.spec)
    assert metrics.tool_errors == 0 and judged.ran_check_script and judged.docs_read == ["README.md"]
    assert metrics.final_text == "Done: the change is applied and checked."
    assert harness.infra_signature(run, metrics) is None
    # The transcript is saved next to the streams, and parsing needs nothing else.
    assert run.session_path == run_dir / "session.jsonl"
    copies = Path(shutil.copytree(run_dir, tmp_path / "copy"))
    moved = run.model_copy(
        update={"session_path": copies / "session.jsonl", "stdout_path": copies / "stdout.log"}
    )
    shutil.rmtree(run_dir)
    assert harness.parse_session(moved) == metrics


@pytest.mark.slow
def test_nothing_changes_nothing_and_fails_verification(workspace, task, tmp_path):
    before = tree_digest(workspace)
    harness, run, metrics = run_claude(task, workspace, tmp_path / "run", {"mock_policy": "nothing"})

    assert run.exit_code == 0
    # The AGENTS.md mapping lives in the config dir: the workspace stays byte for byte the same.
    assert tree_digest(workspace) == before
    assert metrics.tool_calls_by_name == {"Read": 1} and metrics.final_text == "Nothing to change."
    assert not classify(run, metrics, harness.infra_signature(run, metrics), 30).is_infra
    code, _ = run_check_json(workspace)
    assert code != 0


@pytest.mark.slow
@pytest.mark.parametrize(
    ("options", "rule", "bound_s"),
    [
        ({"mock_faults": {"mode": "down"}}, INFRA_SIGNATURE, 15),
        ({"mock_faults": {"mode": "http_error", "status": 500}}, INFRA_SIGNATURE, 15),
        ({"mock_faults": {"mode": "never_answer"}, "api_timeout_ms": 2000}, INFRA_SIGNATURE, 20),
    ],
    ids=["server_down", "http_500", "never_answer"],
)
def test_provider_failures_are_infrastructure_within_seconds(
    workspace, task, tmp_path, options, rule, bound_s
):
    start = time.monotonic()
    harness, run, metrics = run_claude(task, workspace, tmp_path / "run", options)
    elapsed = time.monotonic() - start

    # Waiting for the model, never inside a tool: a stall here is the provider's.
    assert harness.tool_pending(run) is False
    verdict = classify(run, metrics, harness.infra_signature(run, metrics), 30, tool_pending=False)
    assert verdict.is_infra and verdict.rule == rule, (verdict, metrics.error_messages)
    assert elapsed < bound_s
    assert metrics.tool_calls == 0


def process_environ(workdir: Path, deadline_s: float) -> dict[str, str]:
    """The environment of the first process found running in `workdir` (from /proc). A child of
    this test's interpreter between its fork and its exec already has `workdir` as its cwd but
    still this process's environment: it is passed over (a window a loaded machine widens)."""
    deadline = time.monotonic() + deadline_s
    interpreter = os.path.realpath(sys.executable)
    while time.monotonic() < deadline:
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                if os.readlink(proc / "cwd") != str(workdir) or os.readlink(proc / "exe") == interpreter:
                    continue
                raw = (proc / "environ").read_bytes()
            except OSError:
                continue
            return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)
        time.sleep(0.05)
    raise AssertionError(f"no process ran in {workdir}")


@pytest.mark.slow
def test_parent_environment_does_not_reach_the_cli(workspace, task, tmp_path, monkeypatch):
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "parent-token")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "parent-config"))
    result: dict[str, AgentRun] = {}
    # A silent server keeps the CLI alive long enough to read its environment.
    thread = threading.Thread(
        target=lambda: result.update(
            run=run_claude(
                task, workspace, tmp_path / "run", {"mock_faults": {"mode": "silence"}}, stall_s=3
            )[1]
        )
    )
    thread.start()
    try:
        env = process_environ(workspace.resolve(), 10)
    finally:
        thread.join(timeout=30)

    assert "CI" not in env and "ANTHROPIC_AUTH_TOKEN" not in env
    assert env["CLAUDE_CONFIG_DIR"] == str(tmp_path / "run" / "config")
    assert env["HOME"] == str(tmp_path / "run" / "home")
    assert env["ANTHROPIC_BASE_URL"].startswith("http://127.0.0.1:")
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1" and env["CLAUDE_CODE_MAX_RETRIES"] == "0"
    assert result["run"].stalled


class RecordingMessages(AnthropicMessages):
    """The real protocol, keeping every request body so a test can see what the model was sent."""

    def __init__(self) -> None:
        super().__init__(MOCK_TOOLS)
        self.requests: list[dict] = []

    def turn(self, request: dict) -> int:
        self.requests.append(request)
        return super().turn(request)


@pytest.mark.slow
@pytest.mark.parametrize("agents_md", [True, False], ids=["agents_md", "no_agents_md"])
def test_condition_reaches_the_model(workspace, task, tmp_path, monkeypatch, agents_md):
    if not agents_md:
        (workspace / "AGENTS.md").unlink()
    protocol = RecordingMessages()
    monkeypatch.setenv("RIG_TEST_CLAUDE_KEY", "test-key")
    with MockModelServer(Policy("answer", (Step("final", text="ok"),)), protocols=[protocol]) as server:
        # The real-provider path, pointed at a recording mock.
        provider = Provider(
            kind="real", name="recorder", base_url=server.base_url, api_key_env="RIG_TEST_CLAUDE_KEY"
        )
        options = (
            dict(skills=[SKILL], tools=["bash", "read", "edit", "write"], thinking="low") if agents_md else {}
        )
        harness, run, metrics = run_claude(
            task, workspace, tmp_path / "run", {}, provider=provider, **options
        )

    assert run.exit_code == 0 and metrics.final_text == "ok"
    (request,) = [r for r in protocol.requests if r.get("tools")]
    first_message = json.dumps(request["messages"][0])
    assert (AGENTS_MARK in first_message) is agents_md
    assert not (workspace / "CLAUDE.md").exists()
    if agents_md:
        assert harness.condition_mapping is not None
        assert harness.condition_mapping.startswith("AGENTS.md imported via CLAUDE_CONFIG_DIR/CLAUDE.md")
        assert f"skills installed in CLAUDE_CONFIG_DIR/skills: {SKILL_NAME}" in harness.condition_mapping
        assert "tools: --tools=Bash,Read,Edit,Write,Skill" in harness.condition_mapping
        # A deferred tool (`defer_loading`) stays out of the model's context until it searches for it;
        # 2.1.332 always adds one, a placeholder that keeps deferred loading on.
        offered = sorted(t["name"] for t in request["tools"] if not t.get("defer_loading"))
        assert offered == ["Bash", "Edit", "Read", "Skill", "Write"]
        assert "Add or change a field on a taskapp model" in json.dumps(request["messages"])
        assert request["output_config"]["effort"] == "low" and metrics.thinking_level == "low"
    else:
        assert harness.condition_mapping is None
        assert SKILL_NAME not in json.dumps(request)
        assert metrics.thinking_level is None
