"""The OpenCode adapter: parsing sessions captured from real OpenCode runs, and the real CLI driven by
the mock model."""

import json
import time
from pathlib import Path

import pytest
from builtin_pack import BUILTIN
from conftest import run_check_json
from mock_ledger import TOKENS, ledger, parsed_tokens

from harnesses.cli import NODE_BIN
from harnesses.mock_model.openai_chat import OpenAIChat
from harnesses.mock_model.policy import Policy, Step
from harnesses.mock_model.server import MockModelServer, Usage
from harnesses.mock_model.session import LEDGER_FILE
from harnesses.opencode.adapter import (
    CONFIG_DIR,
    KNOWN_TOOLS,
    MOCK_COST,
    MOCK_TOOLS,
    SESSION_FILE,
    OpenCodeHarness,
    failed_step,
    save_session,
    tool_switches,
)
from harnesses.opencode.session import (
    DOUBLE_PRICED_GAP,
    INFRA_SIGNATURE,
    LOG_FILE,
    NO_CACHE_WRITE_GAP,
    TRUNCATED_SIGNATURE,
    parse_files,
    read_transcript,
)
from rig.confine.events import FAILED_REQUESTS_LIMIT, FailureStreak
from rig.schema import AgentRun, Condition, Metrics, Provider, Task
from rig.session.shell import judge
from rig.verify.classify import classify
from rig.workspace.build import init_baseline

DATA = Path(__file__).parent / "data" / "opencode"
SKILL = "tasks/t5_migration/skill"
SKILL_NAME = "taskapp-migration"
# The usage the captured runs were served with (see tests/data/opencode/README.md).
CAPTURED = Usage(input=1000, output=100, cache_read=500, cache_write=40, reasoning=20)
STALL_S = 30.0
# OpenCode 1.18.33 retries a failed request 5 times, 2 s to 32 s apart, with no setting to stop it.
RETRIES = 5
RETRY_WALL_S = 110.0


def captured(case: str, exit_code: int = 0) -> AgentRun:
    """The AgentRun of a captured run, as `rig reclassify` rebuilds it from stored files."""
    folder = DATA / case
    session = folder / SESSION_FILE
    return AgentRun(
        command=["opencode"],
        exit_code=exit_code,
        timed_out=False,
        stalled=False,
        wall_s=1.0,
        session_path=session if session.exists() else None,
        stdout_path=folder / "stdout.log",
        stderr_path=folder / "stderr.log",
    )


def mock_cost(usage: Usage, responses: int) -> float:
    """OpenCode's cost at the mock's prices: cache writes arrive as cached tokens (see the README)."""
    per_response = (
        usage.input * MOCK_COST["input"]
        + usage.output * MOCK_COST["output"]
        + (usage.cache_read + usage.cache_write) * MOCK_COST["cache_read"]
    )
    return responses * per_response / 1e6


def harness(
    task: Task, provider: Provider | None = None, model: str | None = None, **kw: float
) -> OpenCodeHarness:
    return OpenCodeHarness(
        task=task,
        provider=provider or Provider(),
        model=model,
        thinking="high",
        stall_s=kw.get("stall_s", STALL_S),
    )


def tool_outputs(session: Path) -> list[str]:
    """The output of every tool part of an exported session, in order."""
    export = json.loads(session.read_text())
    return [
        str(p["state"].get("output", p["state"].get("error", "")))
        for m in export["messages"]
        for p in m["parts"]
        if p["type"] == "tool"
    ]


class RecordingChat(OpenAIChat):
    """The real Chat Completions protocol, keeping every request body so a test can read what
    OpenCode sent."""

    def __init__(self) -> None:
        super().__init__(MOCK_TOOLS)
        self.requests: list[dict] = []

    def events(self, step: Step, usage: Usage, request: dict, response_id: str) -> list[bytes]:
        self.requests.append(request)
        return super().events(step, usage, request, response_id)


@pytest.fixture
def repository(workspace: Path, tmp_path: Path) -> Path:
    """The workspace as the rig hands it to an agent: a git repository with its baseline commit."""
    init_baseline(workspace, tmp_path / "rig.git")
    return workspace


# --- parse_session on runs captured from real OpenCode ------------------------------------------


# Versions whose `output` holds the reasoning tokens (and whose cost prices them once more).
OPENCODE_VERSIONS = {"1.0.162": True, "1.2.27": True, "1.14.41": False, "1.18.33": False}


@pytest.mark.parametrize("version", OPENCODE_VERSIONS)
def test_versions_reproduce_the_mock_ledger(version):
    """Every OpenCode version's exported session gives the mock's ledger, cache writes among the
    cache reads (see the README). Up to 1.2 OpenCode's output holds the reasoning tokens, which the
    parser tells from the step's `total` (none on 1.0); their cost prices the reasoning twice: the
    record is incomplete, saying so."""
    folder = DATA / "versions" / version
    assert json.loads((folder / "version.json").read_text())["opencode"] == version
    export = json.loads((folder / SESSION_FILE).read_text())
    assert export["info"]["version"] == version
    metrics = parse_files(folder / SESSION_FILE, folder / "stdout.log")
    keys = (*TOKENS, "reasoning")
    totals, tools = ledger(folder, keys)
    parsed = parsed_tokens(metrics, keys)
    assert parsed.pop("cache_read") == totals.pop("cache_read") + totals.pop("cache_write")
    assert parsed.pop("cache_write") == 0 and parsed == totals
    assert metrics.tool_calls_by_name == tools == {"read": 1, "bash": 4, "write": 1}
    assert metrics.tool_errors == 0 and metrics.final_text == "Fixed: has_next now compares with <."
    assert metrics.model == "mock/mock-model"
    twice = 7 * CAPTURED.reasoning * MOCK_COST["output"] / 1e6
    if OPENCODE_VERSIONS[version]:
        assert not metrics.complete and metrics.gaps == [DOUBLE_PRICED_GAP, NO_CACHE_WRITE_GAP]
        assert metrics.cost_usd == pytest.approx(mock_cost(CAPTURED, 7) + twice)
    else:
        assert metrics.complete and metrics.gaps == [NO_CACHE_WRITE_GAP]
        assert metrics.cost_usd == pytest.approx(mock_cost(CAPTURED, 7))
    steps = [
        s for s in read_transcript(folder / SESSION_FILE, folder / "stdout.log").steps if s.source == "agent"
    ]
    assert {(s.output_tokens, s.reasoning_tokens) for s in steps} == {(CAPTURED.output, CAPTURED.reasoning)}


def test_a_session_stored_as_files_is_exported_as_the_database_one(tmp_path):
    """OpenCode 1.0 keeps its session as JSON files under `storage/`, not in SQLite: the adapter
    exports them in the same shape."""
    export = json.loads((DATA / "versions" / "1.0.162" / SESSION_FILE).read_text())
    storage = tmp_path / "data" / "storage"
    info = export["info"]
    files = {storage / "session" / "project" / f"{info['id']}.json": info}
    for message in export["messages"]:
        files[storage / "message" / info["id"] / f"{message['info']['id']}.json"] = message["info"]
        for part in message["parts"]:
            files[storage / "part" / message["info"]["id"] / f"{part['id']}.json"] = part
    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data))
    (tmp_path / "run").mkdir()

    saved = save_session(tmp_path / "data", tmp_path / "run")
    assert saved is not None and json.loads(saved.read_text()) == export
    assert save_session(tmp_path / "empty", tmp_path / "run") is None


def test_captured_success_parses_exactly(task):
    run = captured("success")
    opencode = harness(task)
    metrics = opencode.parse_session(run)
    totals, tools = ledger(DATA / "success")

    assert totals["responses"] == 11
    # OpenAI Chat Completions has no field for cache writes: @ai-sdk/openai-compatible counts
    # the mock's `cached_tokens` (reads and writes) as reads, and OpenCode records no write.
    assert parsed_tokens(metrics) == {
        "input": totals["input"],
        "output": totals["output"],
        "cache_read": totals["cache_read"] + totals["cache_write"],
        "cache_write": 0,
        "responses": 11,
    }
    assert metrics.reasoning_tokens == 11 * CAPTURED.reasoning
    assert metrics.total_tokens == 11 * (
        CAPTURED.input + CAPTURED.output + CAPTURED.cache_read + CAPTURED.cache_write
    )
    assert metrics.tool_calls_by_name == tools == {"read": 2, "bash": 6, "write": 2}
    assert metrics.tool_calls == 10
    # The read of a missing file and the write onto a directory failed; `cat` of a missing file
    # ran (a non-zero exit is the command's, not the tool's).
    assert metrics.tool_errors == 2
    assert metrics.cost_usd == pytest.approx(mock_cost(CAPTURED, 11), abs=1e-9)
    assert metrics.cost_source == "harness"
    assert metrics.model == "mock/mock-model" and metrics.thinking_level == "high"
    assert metrics.stop_reasons == ["tool-calls"] * 10 + ["stop"]
    assert metrics.final_text == "Fixed: has_next now compares with <."
    assert metrics.error_messages == [] and metrics.transport_failures == 0
    assert metrics.read_paths == ["AGENTS.md"]
    assert metrics.read_attempts == ["AGENTS.md", "does-not-exist.txt"]
    assert metrics.bash_search_commands == ["grep -rn 'has_next' taskapp | head -3"]
    assert metrics.ran_pytest
    # Docs, gate and tests are the pack's to judge: the parser leaves them unset.
    judged = judge(metrics, BUILTIN.spec)
    assert judged.docs_read == ["AGENTS.md"] and judged.ran_check_script and judged.ran_tests
    assert "\nCI=\n" in "\n" + "\n".join(tool_outputs(run.session_path)) + "\n"
    assert opencode.infra_signature(run, metrics) is None
    assert opencode.tool_pending(run) is False


def test_event_stream_alone_gives_the_same_counts():
    """Without the exported session, the `--format json` stream carries the same parts."""
    folder = DATA / "success"
    from_session = parse_files(folder / SESSION_FILE, folder / "stdout.log")
    from_stream = parse_files(None, folder / "stdout.log")

    for field in (
        "assistant_messages",
        "tool_calls_by_name",
        "tool_errors",
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "reasoning_tokens",
        "cost_usd",
        "stop_reasons",
        "bash_commands",
        "final_text",
    ):
        assert getattr(from_stream, field) == getattr(from_session, field), field


def test_no_files_at_all_is_no_model_turn(tmp_path, task):
    run = AgentRun(
        command=["opencode"],
        exit_code=1,
        timed_out=False,
        stalled=False,
        wall_s=1.0,
        session_path=None,
        stdout_path=tmp_path / "stdout.log",
        stderr_path=tmp_path / "stderr.log",
    )
    opencode = harness(task)
    metrics = opencode.parse_session(run)

    assert metrics == Metrics()
    assert opencode.infra_signature(run, metrics) is None
    assert classify(run, metrics, None, STALL_S).rule == "no_model_turn"


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("http_500", "mock provider error (HTTP 500)"),
        ("server_down", "Cannot connect to API"),
    ],
)
def test_captured_provider_failures_are_infrastructure(task, case, message):
    run = captured(case, exit_code=1)
    opencode = harness(task)
    metrics = opencode.parse_session(run)

    assert opencode.infra_signature(run, metrics) == INFRA_SIGNATURE
    verdict = classify(run, metrics, opencode.infra_signature(run, metrics), STALL_S)
    assert verdict.is_infra and verdict.rule == INFRA_SIGNATURE
    assert metrics.stop_reasons == ["error"] and message in metrics.error_messages[0]
    # The first attempt and OpenCode's five retries, each a `stream error` in its log.
    assert metrics.transport_failures == 1 + RETRIES
    assert metrics.assistant_messages == 0 and metrics.cost_usd is None
    assert opencode.tool_pending(run) is False


def test_captured_recovered_retry_counts_the_failure_but_is_scored(task):
    run = captured("retry_recovered")
    opencode = harness(task)
    metrics = opencode.parse_session(run)

    assert metrics.transport_failures == 1 and metrics.error_messages == []
    assert metrics.stop_reasons[-1] == "stop" and metrics.assistant_messages == 4
    assert opencode.infra_signature(run, metrics) is None
    assert not classify(run, metrics, None, STALL_S).is_infra


def test_captured_cut_stream_ran_its_tool_and_is_infrastructure(task):
    """A stream cut after its tool call chunk: OpenCode takes the response as complete, with no
    usage, and runs the call the mock never finished serving."""
    run = captured("cut_stream")
    opencode = harness(task)
    metrics = opencode.parse_session(run)
    _totals, tools = ledger(DATA / "cut_stream")

    assert tools == {"bash": 2} and metrics.tool_calls_by_name == {"read": 1, "bash": 2}
    assert metrics.stop_reasons == ["unknown", "tool-calls", "tool-calls", "stop"]
    assert metrics.transport_failures == 1
    assert opencode.infra_signature(run, metrics) == TRUNCATED_SIGNATURE
    verdict = classify(run, metrics, TRUNCATED_SIGNATURE, STALL_S)
    assert verdict.is_infra and verdict.rule == TRUNCATED_SIGNATURE


# --- command line, config and condition mapping --------------------------------------------------


def test_failed_requests_in_a_row_are_counted_from_the_stream_and_a_response_resets_them():
    cut, answered = (DATA / case / "stdout.log" for case in ("cut_stream", "success"))
    failures = [line for line in cut.read_bytes().splitlines(keepends=True) if b'"reason":"unknown"' in line]
    assert len(failures) == 1, "the captured run's one cut stream"
    streak = FailureStreak(failed_step)
    # Fed in uneven pieces, as a pipe delivers it: the cut stream's step, then the answered steps.
    data = cut.read_bytes()
    for start in range(0, len(data), 97):
        streak.feed(data[start : start + 97])
    assert streak.failed == 0 and not streak.tripped
    for _ in range(FAILED_REQUESTS_LIMIT - 1):
        streak.feed(failures[0])
    assert streak.failed == FAILED_REQUESTS_LIMIT - 1 and not streak.tripped
    streak.feed(answered.read_bytes())
    assert streak.failed == 0
    # One read holding more failures than the limit: the count that ended the run stays the limit.
    streak.feed(failures[0] * (FAILED_REQUESTS_LIMIT + 3))
    assert streak.tripped and streak.failed == FAILED_REQUESTS_LIMIT


def test_command_line(task, tmp_path):
    opencode = harness(task)
    command = opencode.command(tmp_path, "-fix it", "high")

    assert command[1:] == [
        "run",
        "--format",
        "json",
        "--pure",
        "--dir",
        str(tmp_path),
        "--title",
        "rig run",
        "--model",
        "mock/mock-model",
        "--variant",
        "high",
        "--",
        "-fix it",
    ]
    assert "--variant" not in opencode.command(tmp_path, "x", None)


def test_config_for_the_mock_and_a_real_provider(task):
    config = harness(task).config("http://127.0.0.1:9/v1", None, 5000)

    assert config["share"] == "disabled" and config["autoupdate"] is False
    assert config["lsp"] is False and config["formatter"] is False and config["snapshot"] is False
    assert config["permission"] == {"*": "allow"}
    assert harness(task).config(None, ["bash"], 5000)["permission"] == {
        "*": "allow",
        **{name: "deny" for name in sorted(KNOWN_TOOLS - {"bash"})},
    }
    mock = config["provider"]["mock"]
    assert mock["npm"] == "@ai-sdk/openai-compatible"
    assert mock["options"] == {
        "apiKey": "{env:RIG_MOCK_API_KEY}",
        "baseURL": "http://127.0.0.1:9/v1",
        "headerTimeout": 5000,
        "chunkTimeout": 5000,
    }
    assert mock["models"]["mock-model"]["cost"] == MOCK_COST

    real = Provider(kind="real", name="acme", api_key_env="ACME_KEY", base_url="https://acme.example/v1")
    config = harness(task, real, "acme-1").config("https://acme.example/v1", None, 5000)
    assert config["model"] == "acme/acme-1"
    entry = config["provider"]["acme"]
    assert (
        entry["options"]["apiKey"] == "{env:ACME_KEY}"
        and entry["options"]["baseURL"] == "https://acme.example/v1"
    )
    assert "cost" not in entry["models"]["acme-1"]

    builtin = Provider(kind="real", name="anthropic", api_key_env="ANTHROPIC_API_KEY")
    config = harness(task, builtin, "claude-x").config(None, None, 5000)
    assert config["provider"]["anthropic"] == {
        "options": {"apiKey": "{env:ANTHROPIC_API_KEY}", "headerTimeout": 5000, "chunkTimeout": 5000}
    }


def test_settings_are_refused_before_a_run(task):
    with pytest.raises(ValueError, match="provider.name, a model"):
        harness(task, Provider(kind="real", name="acme", api_key_env="K"))
    with pytest.raises(ValueError, match="no reasoning variant"):
        harness(task).variant(Condition(name="c", thinking="xhigh"))
    assert harness(task).variant(Condition(name="c")) == "high"


def test_tool_lists_map_to_config_switches():
    assert tool_switches(None) == {}
    assert tool_switches(sorted(KNOWN_TOOLS)) == {}
    switches = tool_switches(["bash", "read", "write"])
    assert switches == {name: "deny" for name in KNOWN_TOOLS - {"bash", "read", "write"}}
    with pytest.raises(ValueError, match="no tools"):
        tool_switches(["bash", "apply_patch"])


def test_mock_protocol_translates_steps():
    assert MOCK_TOOLS.shell("ls", None).arguments == {"command": "ls"}
    assert MOCK_TOOLS.read("README.md", None).arguments == {"filePath": "README.md"}
    assert MOCK_TOOLS.write("a.txt", "x", None).arguments == {"filePath": "a.txt", "content": "x"}


# --- the real CLI, driven by the mock model ------------------------------------------------------


@pytest.mark.slow
def test_version_is_the_pinned_cli(task):
    package = NODE_BIN.parent / "opencode-ai" / "package.json"
    assert harness(task).version() == json.loads(package.read_text())["version"]


@pytest.mark.slow
def test_solution_succeeds_and_metrics_equal_the_ledger(repository, task, tmp_path, monkeypatch):
    monkeypatch.setenv("CI", "true")
    usage = {"input": 1111, "output": 222, "cache_read": 333, "cache_write": 0, "reasoning": 55}
    condition = Condition(name="solution", harness_options={"mock_usage": usage})
    run_dir = tmp_path / "run"
    opencode = harness(task)
    run = opencode.run(repository, task.spec.prompt, condition, run_dir, 120)
    metrics = opencode.parse_session(run)

    assert run.exit_code == 0 and not run.timed_out and not run.stalled
    code, report = run_check_json(repository)
    assert code == 0 and report["ok"], report
    assert run.session_path == run_dir / SESSION_FILE and (run_dir / LOG_FILE).is_file()
    # OpenCode's database is exported and removed; its config dir holds the config and the
    # stand-in that keeps OpenCode from installing its plugin package (nothing was installed).
    assert not (run_dir / "xdg" / "data").exists()
    assert sorted(p.name for p in (run_dir / CONFIG_DIR).iterdir()) == [
        ".gitignore",
        "node_modules",
        "opencode.json",
        "package-lock.json",
    ]
    assert not any((run_dir / CONFIG_DIR / "node_modules").iterdir())
    totals, tools = ledger(run_dir)
    # No title request: every request the mock saw was the agent's.
    assert totals["responses"] == 4 == len(json.loads((run_dir / LEDGER_FILE).read_text())["ledger"])
    assert parsed_tokens(metrics) == totals
    assert metrics.tool_calls_by_name == tools == {"read": 1, "bash": 2}
    assert metrics.reasoning_tokens == 4 * 55
    assert metrics.cost_usd == pytest.approx(mock_cost(Usage(**usage), 4), abs=1e-9)
    assert metrics.model == "mock/mock-model" and metrics.thinking_level == "high"
    judged = judge(metrics, BUILTIN.spec)
    assert judged.ran_check_script and judged.docs_read == ["README.md"]
    assert metrics.tool_errors == 0 and metrics.transport_failures == 0
    assert any("[ ok ] pytest" in o for o in tool_outputs(run.session_path))
    assert opencode.infra_signature(run, metrics) is None
    assert not classify(run, metrics, None, STALL_S).is_infra
    assert opencode.condition_mapping == "thinking: --variant high (reasoning_effort)"
    # Re-parsing from the stored files alone (as reclassify does) gives the same metrics.
    assert opencode.parse_session(AgentRun(**run.model_dump())) == metrics


def work_tree(root: Path) -> dict[str, bytes]:
    """Every file of a workspace outside its `.git`, which the rig's diff never sees."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and ".git" not in p.relative_to(root).parts and "__pycache__" not in p.parts
    }


@pytest.mark.slow
def test_nothing_changes_nothing(repository, task, tmp_path):
    before = work_tree(repository)
    opencode = harness(task)
    run = opencode.run(
        repository,
        task.spec.prompt,
        Condition(name="n", harness_options={"mock_policy": "nothing"}),
        tmp_path / "run",
        120,
    )
    metrics = opencode.parse_session(run)

    assert run.exit_code == 0
    # OpenCode caches its project id in `.git/opencode`; the work tree stays as it was.
    assert work_tree(repository) == before
    assert (repository / ".git" / "opencode").is_file()
    assert metrics.tool_calls_by_name == {"read": 1} and metrics.assistant_messages == 2
    assert metrics.final_text == "Nothing to change."
    assert not classify(run, metrics, opencode.infra_signature(run, metrics), STALL_S).is_infra


@pytest.mark.slow
@pytest.mark.parametrize("retry_after_s", [1, 0])
def test_http_500_is_infrastructure_after_opencodes_retries(repository, task, tmp_path, retry_after_s):
    """OpenCode retries five times and then ends with an `error` event. Its backoff (about a minute,
    tests/data/opencode/http_500) gives way to the provider's retry-after-ms (and Retry-After): the
    same five retries in seconds, or at once; each counts, though the log loses the lines of
    attempts milliseconds apart."""
    faults = {"mode": "http_error", "status": 500, "retry_after_s": retry_after_s}
    condition = Condition(name="f", harness_options={"mock_faults": faults})
    opencode = harness(task, stall_s=60.0)
    start = time.monotonic()
    run = opencode.run(repository, task.spec.prompt, condition, tmp_path / "run", 180)
    metrics = opencode.parse_session(run)
    elapsed = time.monotonic() - start

    assert elapsed < RETRY_WALL_S
    assert run.exit_code == 1 and not run.stalled
    assert metrics.transport_failures == 1 + RETRIES
    verdict = classify(run, metrics, opencode.infra_signature(run, metrics), 60.0)
    assert verdict.is_infra and verdict.rule == INFRA_SIGNATURE


@pytest.mark.slow
def test_a_provider_that_cuts_every_stream_ends_the_run_after_its_failed_requests(repository, task, tmp_path):
    """OpenCode takes a cut stream for a finished step and asks again at once, without end (thousands
    of requests in minutes); the rig ends it after FAILED_REQUESTS_LIMIT failed requests in a row."""
    condition = Condition(name="c", harness_options={"mock_faults": {"mode": "cut_stream"}})
    opencode = harness(task, stall_s=60.0)
    run = opencode.run(repository, task.spec.prompt, condition, tmp_path / "run", 120)
    metrics = opencode.parse_session(run)

    assert run.failed_requests == FAILED_REQUESTS_LIMIT
    assert run.exit_code is None and not (run.timed_out or run.stalled)
    assert run.wall_s < 60, "ended long before the wall timeout"
    entries = json.loads((tmp_path / "run" / LEDGER_FILE).read_text())["ledger"]
    cut = [e for e in entries if e["outcome"] == "cut_stream"]
    # Every request the run made was cut. The rule reads OpenCode's stdout, whose step events trail
    # its requests (about ten a second here): a few more are sent before the kill lands, never tens.
    assert FAILED_REQUESTS_LIMIT <= len(cut) < 2 * FAILED_REQUESTS_LIMIT and len(cut) == len(entries)
    verdict = classify(run, metrics, opencode.infra_signature(run, metrics), 60.0)
    assert verdict.is_infra and verdict.rule == TRUNCATED_SIGNATURE
    assert f"after {FAILED_REQUESTS_LIMIT} model requests failed in a row" in (verdict.detail or "")


@pytest.mark.slow
def test_environment_skills_tools_and_agents_md_reach_opencode_as_configured(
    repository, task, tmp_path, monkeypatch
):
    """Through the real-provider path, with a recording server: what OpenCode sent and what its shell saw."""
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("RIG_PARENT_ONLY", "leaked")
    monkeypatch.setenv("RIG_TEST_KEY", "test-key")
    # A CLAUDE.md where OpenCode's Claude Code fallback would look: it must stay unread.
    (repository / "CLAUDE.md").write_text("CLAUDE_FALLBACK_MARKER\n")
    protocol = RecordingChat()
    policy = Policy("env", (Step("shell", command='echo "CI=$CI"; env | sort'), Step("final", text="ok")))
    condition = Condition(name="e", skills=[SKILL], tools=["bash", "read", "skill"], thinking="low")
    with MockModelServer(policy, protocols=[protocol]) as server:
        provider = Provider(
            kind="real", name="acme", base_url=f"{server.base_url}/v1", api_key_env="RIG_TEST_KEY"
        )
        opencode = OpenCodeHarness(
            task=task, provider=provider, model="acme-1", thinking=None, stall_s=STALL_S
        )
        run = opencode.run(repository, "Look around.", condition, tmp_path / "run", 120)
    metrics = opencode.parse_session(run)

    assert run.exit_code == 0 and metrics.final_text == "ok"
    [output] = tool_outputs(run.session_path)
    assert "\nCI=\n" in f"\n{output}" and "RIG_PARENT_ONLY" not in output
    assert f"HOME={tmp_path / 'run' / 'home'}" in output
    # Every request was the agent's (no title request), with the key as a bearer token.
    assert len(protocol.requests) == 2
    first = protocol.requests[0]
    assert first["model"] == "acme-1" and first["reasoning_effort"] == "low"
    assert metrics.model == "acme/acme-1" and metrics.thinking_level == "low"
    assert {t["function"]["name"] for t in first["tools"]} == {"bash", "read", "skill"}
    sent = json.dumps(first["messages"])
    assert "Rules for coding agents working in this repository" in sent
    assert "CLAUDE_FALLBACK_MARKER" not in sent
    assert SKILL_NAME in sent
    assert opencode.condition_mapping == (
        f"skills copied to opencode-config/skills/ ({SKILL_NAME}); tools: permission deny for "
        f"{sorted(KNOWN_TOOLS - {'bash', 'read', 'skill'})}; thinking: --variant low (reasoning_effort)"
    )
    assert (tmp_path / "run" / CONFIG_DIR / "skills" / SKILL_NAME / "SKILL.md").is_file()


@pytest.mark.slow
def test_without_agents_md_opencode_sees_none(repository, task, tmp_path, monkeypatch):
    monkeypatch.setenv("RIG_TEST_KEY", "test-key")
    (repository / "AGENTS.md").unlink()
    protocol = RecordingChat()
    with MockModelServer(Policy("f", (Step("final", text="ok"),)), protocols=[protocol]) as server:
        provider = Provider(
            kind="real", name="acme", base_url=f"{server.base_url}/v1", api_key_env="RIG_TEST_KEY"
        )
        run = OpenCodeHarness(
            task=task, provider=provider, model="acme-1", thinking=None, stall_s=STALL_S
        ).run(repository, "Hello.", Condition(name="n"), tmp_path / "run", 120)

    assert run.exit_code == 0
    sent = json.dumps(protocol.requests[0]["messages"])
    assert "Rules for coding agents working in this repository" not in sent
