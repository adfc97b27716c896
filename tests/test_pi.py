"""The Pi adapter: parsing sessions captured from real Pi runs, and the real CLI driven by the mock model."""

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from builtin_pack import BUILTIN
from conftest import run_check_json
from mock_ledger import TOKENS, captured_patch_command, ledger, parsed_tokens

from harnesses.cli import NODE_BIN
from harnesses.cli_harness import install_skill, skill_name
from harnesses.logs import pi_failed_attempts
from harnesses.mock_model.openai_chat import OpenAIChat
from harnesses.mock_model.policy import Policy, Step
from harnesses.mock_model.server import MockModelServer, Usage
from harnesses.pi.adapter import (
    BUILTIN_PROVIDERS,
    INFRA_SIGNATURE,
    LEGACY_USAGE_GAP,
    MOCK_TOOLS,
    NO_REASONING_GAP,
    PI_BASE_URLS,
    TRUNCATED_SIGNATURE,
    PiHarness,
    models_config,
    parse_files,
)
from rig.confine.keygate import PLACEHOLDER
from rig.paths import REPO_ROOT
from rig.schema import AgentRun, Condition, Metrics, Provider, Task
from rig.session.shell import judge
from rig.verify.classify import classify
from rig.workspace.build import tree_digest

DATA = Path(__file__).parent / "data" / "pi"
SKILL = "tasks/t5_migration/skill"
SKILL_NAME = "taskapp-migration"
# The usage the captured runs were served with (see tests/data/pi/README.md).
CAPTURED = Usage(input=1000, output=100, cache_read=500, cache_write=40, reasoning=20)
# Pi's cost for one captured response at the mock model's prices (USD per million tokens).
CAPTURED_COST = (1000 * 3 + 100 * 15 + 500 * 0.3 + 40 * 3.75) / 1e6
STALL_S = 30.0
# A provider failure must end a run in seconds; Node start-up alone takes about one.
FAULT_WALL_S = 15.0


def captured(case: str) -> AgentRun:
    """The AgentRun of a captured run, as `rig reclassify` rebuilds it from stored files."""
    folder = DATA / case
    session = folder / "session.jsonl"
    return AgentRun(
        command=["pi"],
        exit_code=0,
        timed_out=False,
        stalled=False,
        wall_s=1.0,
        session_path=session if session.exists() else None,
        stdout_path=folder / "stdout.log",
        stderr_path=folder / "stderr.log",
    )


def pi_tokens(metrics: Metrics) -> dict[str, int]:
    # An errored attempt is an assistant message in Pi's session, but the mock served no response.
    return parsed_tokens(metrics, responses=metrics.assistant_messages - metrics.stop_reasons.count("error"))


def harness(task: Task, provider: Provider | None = None, model: str | None = None) -> PiHarness:
    return PiHarness(task, provider or Provider(), model, "high", STALL_S)


def tool_results(session: Path) -> list[str]:
    """The text of every tool result in a session file."""
    texts = []
    for line in session.read_text().splitlines():
        entry = json.loads(line)
        message = entry.get("message", {})
        if entry["type"] == "message" and message.get("role") == "toolResult":
            texts.append("".join(c.get("text", "") for c in message["content"]))
    return texts


class RecordingChat(OpenAIChat):
    """The real OpenAI Chat protocol, keeping every request body so a test can read the prompt."""

    def __init__(self) -> None:
        super().__init__(MOCK_TOOLS)
        self.requests: list[dict] = []

    def events(self, step: Step, usage: Usage, request: dict, response_id: str) -> list[bytes]:
        self.requests.append(request)
        return super().events(step, usage, request, response_id)


# --- parse_session on sessions captured from real runs -----------------------------------------


def test_captured_success_parses_exactly(task):
    run = captured("success")
    pi = harness(task)
    metrics = pi.parse_session(run)

    assert metrics.model == "mock/mock-model"
    assert metrics.thinking_level == "high"
    assert metrics.assistant_messages == 9
    assert metrics.tool_calls == 8
    assert metrics.tool_calls_by_name == {"read": 1, "bash": 6, "write": 1}
    # Pi marks a command that exits non-zero (`cat does-not-exist.txt`) as a failed tool call.
    assert metrics.tool_errors == 1
    assert metrics.input_tokens == 9 * CAPTURED.input
    assert metrics.output_tokens == 9 * CAPTURED.output
    assert metrics.cache_read_tokens == 9 * CAPTURED.cache_read
    assert metrics.cache_write_tokens == 9 * CAPTURED.cache_write
    # Pi keeps no reasoning count: OpenAI's completion tokens already include it.
    assert metrics.reasoning_tokens == 0
    assert metrics.total_tokens == 9 * (CAPTURED.input + CAPTURED.output + CAPTURED.cache_read + 40)
    assert metrics.cost_usd == pytest.approx(9 * CAPTURED_COST)
    assert metrics.cost_source == "harness"
    assert metrics.stop_reasons == ["toolUse"] * 8 + ["stop"]
    assert metrics.error_messages == [] and metrics.transport_failures == 0
    assert metrics.bash_commands == [
        "grep -rn 'has_next' taskapp | head -3",
        "sed -n 40,45p taskapp/utils/pagination.py",
        "cat does-not-exist.txt",
        captured_patch_command(task.solution_patch.read_text()),
        "python scripts/check.py",
        "python -m pytest -q tests/unit 2>&1 | tail -1",
    ]
    assert metrics.bash_search_commands == ["grep -rn 'has_next' taskapp | head -3"]
    # `cat does-not-exist.txt` printed "No such file or directory": it read nothing.
    assert metrics.read_paths == ["AGENTS.md", "taskapp/utils/pagination.py"]
    assert metrics.ran_pytest and not metrics.read_skill
    # Docs, gate and tests are the pack's to judge: the parser leaves them unset.
    judged = judge(metrics, BUILTIN.spec)
    assert judged.docs_read == ["AGENTS.md"] and judged.ran_check_script and judged.ran_tests
    assert metrics.final_text == "Fixed: has_next now compares with <."
    assert pi.infra_signature(run, metrics) is None
    assert not classify(run, metrics, None, STALL_S).is_infra
    # The parsed tokens and tool calls equal what the mock served.
    totals, tools = ledger(DATA / "success")
    assert pi_tokens(metrics) == totals
    assert metrics.tool_calls_by_name == tools


PI_VERSIONS = ("0.13.2", "0.31.1", "0.52.12", "0.73.1")
# The versions whose openai-completions usage adds reasoning to output and cache writes to cache reads.
LEGACY_PI = ("0.13.2", "0.31.1", "0.52.12")


@pytest.mark.parametrize("version", PI_VERSIONS)
def test_versions_reproduce_the_mock_ledger(version):
    """Every Pi version's files give the mock's ledger: tokens, responses and tool calls. Before
    0.60, Pi recorded OpenAI-completions output with the reasoning tokens added once more and cache
    writes inside cache reads: the parser reads what is there and marks the record incomplete,
    saying so. Pi keeps no reasoning count on any version. 0.13 saves no session in print mode:
    the event stream alone gives the numbers."""
    folder = DATA / "versions" / version
    assert json.loads((folder / "version.json").read_text())["pi"] == version
    session = folder / "session.jsonl"
    metrics = parse_files(session if session.exists() else None, folder / "stdout.log")
    totals, tools = ledger(folder, (*TOKENS, "reasoning"))
    parsed = parsed_tokens(metrics, (*TOKENS, "reasoning"))
    reasoning = totals.pop("reasoning")
    assert parsed.pop("reasoning") == 0
    if version in LEGACY_PI:
        assert parsed.pop("output") == totals.pop("output") + reasoning
        assert parsed.pop("cache_read") == totals.pop("cache_read") + totals.pop("cache_write")
        assert parsed.pop("cache_write") == 0
        assert not metrics.complete
        assert metrics.gaps == [LEGACY_USAGE_GAP.format(n=totals["responses"]), NO_REASONING_GAP]
    else:
        assert metrics.complete and metrics.gaps == [NO_REASONING_GAP]
    assert parsed == totals
    assert metrics.tool_calls_by_name == tools == {"read": 1, "bash": 4, "write": 1}
    assert metrics.tool_errors == 1  # `cat does-not-exist.txt`
    assert metrics.model == "mock/mock-model" and metrics.thinking_level in ("high", None)
    assert metrics.final_text == "Fixed: has_next now compares with <."


def test_event_stream_alone_gives_the_same_metrics():
    """Without a session file (Pi writes none before a first answer) stdout's message_end events count."""
    from_session = parse_files(DATA / "success" / "session.jsonl", DATA / "success" / "stdout.log")
    from_stream = parse_files(None, DATA / "success" / "stdout.log")

    # Only the session records the thinking level.
    assert from_stream.thinking_level is None
    assert from_stream.model_copy(update={"thinking_level": "high"}) == from_session


def test_torn_last_line_is_skipped(tmp_path):
    lines = (DATA / "success" / "session.jsonl").read_text().splitlines(keepends=True)
    torn = tmp_path / "session.jsonl"
    torn.write_text("".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])

    metrics = parse_files(torn, None)

    assert metrics.assistant_messages == 8
    assert metrics.final_text is None


def test_no_files_at_all_is_no_model_turn(tmp_path, task):
    run = AgentRun(
        command=["pi"],
        exit_code=1,
        timed_out=False,
        stalled=False,
        wall_s=0.5,
        session_path=None,
        stdout_path=tmp_path / "stdout.log",
        stderr_path=tmp_path / "stderr.log",
    )
    metrics = harness(task).parse_session(run)

    assert metrics == Metrics()
    assert (
        classify(run, metrics, harness(task).infra_signature(run, metrics), STALL_S).rule == "no_model_turn"
    )


def test_captured_provider_error_is_infrastructure(task):
    run = captured("provider_error")
    pi = harness(task)
    metrics = pi.parse_session(run)

    assert metrics.assistant_messages == 1 and metrics.tool_calls == 0
    assert metrics.stop_reasons == ["error"]
    assert metrics.error_messages == ["500 mock provider error (HTTP 500)"]
    assert metrics.transport_failures == 1
    assert metrics.input_tokens == metrics.output_tokens == metrics.total_tokens == 0
    assert metrics.cost_usd == 0.0
    assert pi.infra_signature(run, metrics) == INFRA_SIGNATURE
    verdict = classify(run, metrics, pi.infra_signature(run, metrics), STALL_S)
    assert verdict.is_infra and verdict.rule == INFRA_SIGNATURE
    assert verdict.detail == "500 mock provider error (HTTP 500)"


def test_captured_retries_that_gave_up_are_infrastructure(task):
    """With Pi's retries on: every failed attempt stays in the session; auto_retry_end says it gave up."""
    run = captured("retry_gave_up")
    pi = harness(task)
    metrics = pi.parse_session(run)

    assert metrics.stop_reasons == ["error"] * 3
    assert metrics.error_messages == ["503 mock provider error (HTTP 503)"] * 3
    assert metrics.transport_failures == 3
    assert pi.infra_signature(run, metrics) == INFRA_SIGNATURE


def test_captured_recovered_retry_counts_the_failure_but_is_scored(task):
    run = captured("retry_recovered")
    pi = harness(task)
    metrics = pi.parse_session(run)

    assert metrics.stop_reasons == ["error", "toolUse", "stop"]
    assert metrics.transport_failures == 1
    assert metrics.tool_calls_by_name == {"bash": 1}
    assert metrics.final_text == "Nothing to change."
    assert pi.infra_signature(run, metrics) is None
    assert not classify(run, metrics, None, STALL_S).is_infra
    totals, tools = ledger(DATA / "retry_recovered")
    assert pi_tokens(metrics) == totals and metrics.tool_calls_by_name == tools
    # The run's environment was Pi's own, not the test runner's (CI=true was set when captured).
    assert tool_results(DATA / "retry_recovered" / "session.jsonl") == ["CI=\n"]


def test_captured_cut_stream_is_infrastructure(task):
    """Pi takes a stream cut before its end for a whole response: only the missing usage shows it."""
    run = captured("cut_stream")
    pi = harness(task)
    metrics = pi.parse_session(run)

    assert metrics.stop_reasons == ["stop", "stop"]
    assert metrics.tool_calls_by_name == {"bash": 1}
    assert metrics.transport_failures == 1
    assert pi.infra_signature(run, metrics) == TRUNCATED_SIGNATURE
    totals, _ = ledger(DATA / "cut_stream")
    assert metrics.input_tokens == totals["input"] and metrics.output_tokens == totals["output"]


def with_diagnostics(tmp_path: Path, diagnostics: dict[int, list[dict]]) -> Path:
    """The captured success session with `diagnostics` added to its n-th assistant messages."""
    lines, n = [], 0
    for line in (DATA / "success" / "session.jsonl").read_text().splitlines():
        entry = json.loads(line)
        if entry["type"] == "message" and entry["message"]["role"] == "assistant":
            entry["message"]["diagnostics"] = diagnostics.get(n, [])
            n += 1
        lines.append(json.dumps(entry) + "\n")
    session = tmp_path / "session.jsonl"
    session.write_text("".join(lines))
    return session


def test_transport_failures_pi_recovered_from_are_counted_but_scored(task, tmp_path):
    """A WebSocket that failed before SSE took over: Pi notes it on the message that completed."""
    session = with_diagnostics(
        tmp_path,
        {
            # As the issue quotes it, and as pi-ai 0.73.1 writes it (details, error object).
            1: [
                {"type": "provider_transport_failure", "error": "WebSocket error", "fallbackTransport": "sse"}
            ],
            4: [
                {
                    "type": "provider_transport_failure",
                    "timestamp": 1,
                    "error": {"name": "Error", "message": "WebSocket error"},
                    "details": {"configuredTransport": "auto", "fallbackTransport": "sse"},
                },
                {"type": "other_diagnostic"},
            ],
        },
    )
    run = captured("success").model_copy(update={"session_path": session})
    pi = harness(task)
    metrics = pi.parse_session(run)

    assert metrics.transport_failures == 2
    assert metrics.stop_reasons == ["toolUse"] * 8 + ["stop"]
    assert pi.infra_signature(run, metrics) is None
    assert not classify(run, metrics, None, STALL_S).is_infra


@pytest.mark.parametrize(
    ("diagnostics", "stop_reason", "failures"),
    [
        ([], "stop", 0),
        ([], "error", 1),
        ([{"type": "provider_transport_failure", "fallbackTransport": "sse"}], "stop", 1),
        # Both transports failed: the WebSocket, then the SSE request the message ended with.
        ([{"type": "provider_transport_failure", "details": {"fallbackTransport": "sse"}}], "error", 2),
        # Failed after the stream started, no fallback: the error it ended with is that failure.
        (
            [{"type": "provider_transport_failure", "details": {"phase": "after_message_stream_start"}}],
            "error",
            1,
        ),
        ([{"type": "unrelated"}], "stop", 0),
    ],
)
def test_each_failed_attempt_behind_a_message_counts_once(diagnostics, stop_reason, failures):
    message = {"role": "assistant", "stopReason": stop_reason, "diagnostics": diagnostics}
    assert pi_failed_attempts(message) == failures


# --- configuration, without running Pi ------------------------------------------------------------


def test_command_line(task, tmp_path):
    pi = harness(task)
    condition = Condition(name="c", thinking="low", tools=["read", "bash"])
    command = pi.command("Fix it.", condition, tmp_path, [tmp_path / "skills" / SKILL_NAME])

    assert command[0] == str(PiHarness.locate_cli()[1])
    assert command[1:] == [
        "-p",
        "--mode",
        "json",
        "--no-extensions",
        "--no-skills",
        "--no-prompt-templates",
        "--no-themes",
        "--session-dir",
        str(tmp_path / "session"),
        "--model",
        "mock/mock-model",
        "--thinking",
        "low",
        "--skill",
        str(tmp_path / "skills" / SKILL_NAME),
        "--tools",
        "read,bash",
        "Fix it.",
    ]
    default = pi.command("Fix it.", Condition(name="d", tools=[]), tmp_path, [])
    assert default[default.index("--thinking") + 1] == "high"
    assert "--no-tools" in default and "--tools" not in default
    unset = PiHarness(task, Provider(), "other", None, STALL_S).command(
        "Go.", Condition(name="u"), tmp_path, []
    )
    assert "--thinking" not in unset and "mock/other" in unset
    with pytest.raises(ValueError, match="must not start with '-'"):
        pi.command("--help", condition, tmp_path, [])


def test_real_provider_config(task):
    openai = Provider(kind="real", name="openai", api_key_env="OPENAI_API_KEY")
    proxied = Provider(kind="real", name="anthropic", base_url="https://proxy.test/v1", api_key_env="MY_KEY")
    custom = Provider(kind="real", name="local", base_url="http://127.0.0.1:9/v1", api_key_env="LOCAL_KEY")

    assert models_config(openai, "gpt-x", None) is None
    assert models_config(proxied, "m", proxied.base_url) == {
        "providers": {"anthropic": {"baseUrl": "https://proxy.test/v1", "apiKey": "MY_KEY"}}
    }
    assert models_config(custom, "m1", custom.base_url) == {
        "providers": {
            "local": {
                "baseUrl": "http://127.0.0.1:9/v1",
                "apiKey": "LOCAL_KEY",
                "api": "openai-completions",
                "models": [{"id": "m1"}],
            }
        }
    }
    with pytest.raises(ValueError, match="provider.name and a model"):
        PiHarness(task, openai, None, None, STALL_S)


def test_skill_is_copied_under_its_own_name(tmp_path):
    target = install_skill(SKILL, tmp_path / "skills")

    assert target == tmp_path / "skills" / SKILL_NAME
    assert (target / "SKILL.md").read_bytes() == (REPO_ROOT / SKILL / "SKILL.md").read_bytes()
    with pytest.raises(ValueError, match="no SKILL.md"):
        install_skill("tasks/t5_migration", tmp_path / "skills")
    # Only the front matter names a skill; without one, the directory's name stands.
    assert skill_name("---\ndescription: d\nname: 'x-y'\n---\nname: body\n") == "x-y"
    assert skill_name("---\ndescription: d\n---\nname: body\n") is None
    assert skill_name("# no front matter\nname: z\n") is None


@pytest.mark.slow
def test_builtin_provider_list_matches_pi():
    """models.json needs models for a provider Pi does not know: the list must be Pi's own."""
    script = "import('@mariozechner/pi-ai').then(m => console.log(JSON.stringify(m.getProviders())))"
    node = shutil.which("node")
    assert node is not None
    proc = subprocess.run(
        [node, "--input-type=module", "-e", script],
        cwd=NODE_BIN.parent.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert set(json.loads(proc.stdout)) == BUILTIN_PROVIDERS


@pytest.mark.slow
def test_the_base_urls_the_key_gateway_forwards_to_are_pis_own():
    """A built-in provider is reached through the key gateway at the base URL every model of it
    names in pi-ai (one per provider in the table)."""
    script = (
        "import('@mariozechner/pi-ai').then(m => console.log(JSON.stringify(Object.fromEntries("
        "m.getProviders().map(p => [p, [...new Set(m.getModels(p).map(x => x.baseUrl))]])))))"
    )
    proc = subprocess.run(
        [str(shutil.which("node")), "--input-type=module", "-e", script],
        cwd=NODE_BIN.parent.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    urls = json.loads(proc.stdout)
    assert {name: urls[name] for name in PI_BASE_URLS} == {name: [url] for name, url in PI_BASE_URLS.items()}


# --- the real CLI against the mock model ------------------------------------------------------------


@pytest.mark.slow
def test_version_is_the_pinned_cli(task):
    package = NODE_BIN.parent / "@mariozechner" / "pi-coding-agent" / "package.json"
    assert harness(task).version() == json.loads(package.read_text())["version"]


@pytest.mark.slow
def test_solution_succeeds_and_metrics_equal_the_ledger(workspace, task, tmp_path):
    usage = {"input": 1111, "output": 222, "cache_read": 333, "cache_write": 44, "reasoning": 5}
    condition = Condition(name="solution", harness_options={"mock_usage": usage})
    run_dir = tmp_path / "run"
    pi = harness(task)
    run = pi.run(workspace, task.spec.prompt, condition, run_dir, 120)
    metrics = pi.parse_session(run)

    assert run.exit_code == 0 and not run.timed_out and not run.stalled
    code, report = run_check_json(workspace)
    assert code == 0 and report["ok"], report
    # The session was saved where `rig reclassify` looks, byte for byte Pi's own file.
    assert run.session_path == run_dir / "session.jsonl"
    [original] = (run_dir / "session").glob("*.jsonl")
    assert run.session_path.read_bytes() == original.read_bytes()
    totals, tools = ledger(run_dir)
    assert totals["responses"] == 4
    assert pi_tokens(metrics) == totals
    assert metrics.tool_calls_by_name == tools == {"read": 1, "bash": 2}
    assert metrics.total_tokens == 4 * (1111 + 222 + 333 + 44)
    assert metrics.cost_usd == pytest.approx(4 * (1111 * 3 + 222 * 15 + 333 * 0.3 + 44 * 3.75) / 1e6)
    assert metrics.model == "mock/mock-model" and metrics.thinking_level == "high"
    judged = judge(metrics, BUILTIN.spec)
    assert judged.ran_check_script and judged.docs_read == ["README.md"]
    assert metrics.tool_errors == 0 and metrics.transport_failures == 0
    assert pi.infra_signature(run, metrics) is None
    assert not classify(run, metrics, None, STALL_S).is_infra
    # Re-parsing from the stored files alone (as reclassify does) gives the same metrics.
    stored = AgentRun(**run.model_dump(exclude={"session_path"}), session_path=run_dir / "session.jsonl")
    assert pi.parse_session(stored) == metrics


@pytest.mark.slow
def test_nothing_changes_nothing(workspace, task, tmp_path):
    before = tree_digest(workspace)
    pi = harness(task)
    condition = Condition(name="nothing", harness_options={"mock_policy": "nothing"})
    run = pi.run(workspace, task.spec.prompt, condition, tmp_path / "run", 120)
    metrics = pi.parse_session(run)

    assert run.exit_code == 0
    assert tree_digest(workspace) == before
    assert metrics.tool_calls_by_name == {"read": 1}
    assert metrics.final_text == "Nothing to change."
    assert not classify(run, metrics, pi.infra_signature(run, metrics), STALL_S).is_infra


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fault", "options", "rule"),
    [
        ("server_down", {"mock_faults": {"mode": "down"}}, INFRA_SIGNATURE),
        ("http_500", {"mock_faults": {"mode": "http_error", "status": 500}}, INFRA_SIGNATURE),
        # No response headers at all: Pi's own request timeout (settings.json) ends it.
        (
            "never_answer",
            {"mock_faults": {"mode": "never_answer"}, "provider_timeout_ms": 3000},
            INFRA_SIGNATURE,
        ),
        (
            "cut_stream",
            {"mock_faults": {"mode": "cut_stream", "first_n": 1, "after_events": 2}},
            TRUNCATED_SIGNATURE,
        ),
    ],
)
def test_provider_failures_are_infrastructure_within_seconds(workspace, task, tmp_path, fault, options, rule):
    pi = harness(task)
    start = time.monotonic()
    run = pi.run(
        workspace, task.spec.prompt, Condition(name=fault, harness_options=options), tmp_path / "run", 120
    )
    metrics = pi.parse_session(run)
    # Waiting for the model, never inside a tool: a stall here is the provider's.
    assert pi.tool_pending(run) is False
    verdict = classify(run, metrics, pi.infra_signature(run, metrics), STALL_S, tool_pending=False)
    elapsed = time.monotonic() - start

    assert verdict.is_infra and verdict.rule == rule, (verdict, metrics)
    assert elapsed < FAULT_WALL_S, f"{fault} took {elapsed:.1f}s"
    if rule == INFRA_SIGNATURE:
        # Pi exits 0 on a provider failure: only the session says what happened.
        assert run.exit_code == 0 and metrics.stop_reasons[-1] == "error"


@pytest.mark.slow
def test_environment_is_not_inherited(workspace, task, tmp_path, monkeypatch):
    """CI=true and any other variable of the parent stay out; this also drives the real-provider path."""
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("RIG_CANARY", "leaked")
    monkeypatch.setenv("RIG_TEST_PI_KEY", "test-key-value")
    probe = 'echo "CI=${CI:-unset} CANARY=${RIG_CANARY:-unset} KEY=${RIG_TEST_PI_KEY:-unset}"'
    policy = Policy("env", (Step("shell", command=probe), Step("final", text="ok")))
    with MockModelServer(policy, protocols=[OpenAIChat(MOCK_TOOLS)]) as server:
        provider = Provider(
            kind="real", name="rig-local", base_url=f"{server.base_url}/v1", api_key_env="RIG_TEST_PI_KEY"
        )
        pi = harness(task, provider, "local-model")
        run = pi.run(workspace, task.spec.prompt, Condition(name="env"), tmp_path / "run", 120)
        served = server.served()

    assert run.exit_code == 0 and len(served) == 2
    assert run.session_path is not None
    # The key variable is passed on purpose (Pi reads it), holding the placeholder the key gateway
    # swaps for the key (rig.confine.keygate); nothing else of the parent is.
    assert tool_results(run.session_path) == [f"CI=unset CANARY=unset KEY={PLACEHOLDER}\n"]
    assert "test-key-value" not in " ".join(run.command)
    assert pi.parse_session(run).model == "rig-local/local-model"
    assert os.environ["CI"] == "true"


@pytest.mark.slow
def test_skill_and_tools_reach_the_model(workspace, task, tmp_path, monkeypatch):
    monkeypatch.setenv("RIG_TEST_PI_KEY", "k")
    run_dir = tmp_path / "run"
    skill_md = run_dir / "skills" / SKILL_NAME / "SKILL.md"
    policy = Policy("skill", (Step("read", path=str(skill_md)), Step("final", text="Read it.")))
    chat = RecordingChat()
    with MockModelServer(policy, protocols=[chat]) as server:
        provider = Provider(
            kind="real", name="rig-local", base_url=f"{server.base_url}/v1", api_key_env="RIG_TEST_PI_KEY"
        )
        pi = harness(task, provider, "local-model")
        condition = Condition(name="skill", skills=[SKILL], tools=["read", "bash"])
        run = pi.run(workspace, task.spec.prompt, condition, run_dir, 120)
    metrics = pi.parse_session(run)

    command = run.command
    assert "--no-skills" in command
    assert command[command.index("--skill") + 1] == str(skill_md.parent)
    assert skill_md.read_bytes() == (REPO_ROOT / SKILL / "SKILL.md").read_bytes()
    system = chat.requests[0]["messages"][0]
    assert system["role"] in ("system", "developer")
    assert f"<name>{SKILL_NAME}</name>" in system["content"]
    assert f"<location>{skill_md}</location>" in system["content"]
    assert [t["function"]["name"] for t in chat.requests[0]["tools"]] == ["read", "bash"]
    assert metrics.read_skill and metrics.tool_errors == 0
