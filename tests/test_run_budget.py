"""Per-run budgets (`[run_budget]`): the rig adds up the usage a harness reports as it runs (on its
stdout, or in its session files as they grow) and stops the agent once a limit is passed; the run
fails at stage `budget` and the report counts it.

Every real CLI a budget can hold runs against the mock model with a long policy (a shell command
per response), so the budget is passed after a few responses of many."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harnesses.claude_code.adapter import stream_usage as claude_usage
from harnesses.codex.adapter import CodexHarness
from harnesses.codex.session import parse_files as parse_codex
from harnesses.gemini.adapter import GeminiHarness
from harnesses.gemini.adapter import parse_files as parse_gemini
from harnesses.logs import pi_live_usage
from harnesses.mock_model.session import LEDGER_FILE
from harnesses.opencode.adapter import stream_usage as opencode_usage
from harnesses.opencode.session import parse_files as parse_opencode
from harnesses.pi.adapter import parse_files as parse_pi
from harnesses.registry import adapter_class, calibrated_names
from rig.confine.agent import Confinement
from rig.confine.events import MAX_LINE_BYTES
from rig.confine.run_budget import UsageMeter, reconcile
from rig.confine.session_usage import SessionTail, SessionUsage
from rig.experiment.estimate import priced
from rig.experiment.load import ExperimentError, load_experiment
from rig.run.steps.collect import session_metrics
from rig.schema import AgentRun, BudgetStop, Condition, Metrics, Provider, RunBudget, Task

RIG = str(Path(sys.executable).with_name("rig"))
DATA = Path(__file__).resolve().parent / "data"
STALL_S = 30.0
TIMEOUT_S = 120
STEPS = 20
# A long policy: the README, then a shell command per response, many more than the budget allows.
LONG = {"mock_policy": "commands", "commands": [f"echo step {n}" for n in range(STEPS)]}
# Every real CLI a budget can hold: those that report usage while they run, on their stdout or in
# their session (the capability table).
BUDGETED = [
    name
    for name in calibrated_names()
    if adapter_class(name).live_usage is not None or adapter_class(name).session_usage is not None
]
# The responses the long policy takes to the end: the README, a command per step, the answer.
RESPONSES = STEPS + 2


def ledger_usage(run_dir: Path) -> list[int]:
    """The tokens of each response the mock served in full, in order."""
    ledger = json.loads((run_dir / LEDGER_FILE).read_text())["ledger"]
    return [sum(e["usage"][k] for k in ("input", "output", "cache_read", "cache_write")) for e in ledger]


def processes_in(folder: Path) -> list[int]:
    """Processes whose working directory is in `folder`: an agent's leftovers would be."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:
            continue
        if cwd == folder or folder in cwd.parents:
            found.append(int(entry.name))
    return found


def run_with_budget(
    harness: str, task: Task, workspace: Path, run_dir: Path, budget: RunBudget, options: dict
) -> AgentRun:
    adapter = adapter_class(harness)(task, Provider(), None, None, STALL_S, Confinement(run_budget=budget))
    condition = Condition(name="arm", harness_options=options)
    return adapter.run(workspace, task.spec.prompt, condition, run_dir, TIMEOUT_S)


# --- the meter, on the captured streams of the real CLIs ----------------------------------------------


def feed_in_pieces(meter: UsageMeter, path: Path, size: int) -> None:
    data = path.read_bytes()
    for start in range(0, len(data), size):
        meter.feed(data[start : start + size])


def test_the_meter_sums_pis_stream_as_its_parser_does():
    folder = DATA / "pi" / "success"
    total = parse_pi(folder / "session.jsonl", folder / "stdout.log").total_tokens
    meter = UsageMeter(RunBudget(max_tokens=total), pi_live_usage)
    # Pieces that cut lines anywhere: the usage is the same.
    feed_in_pieces(meter, folder / "stdout.log", 97)
    assert meter.stop is None, "at the limit is not past it"
    passed = UsageMeter(RunBudget(max_tokens=total - 1), pi_live_usage)
    feed_in_pieces(passed, folder / "stdout.log", 4096)
    assert passed.stop is not None and passed.stop.tokens == total and passed.stop.limit == "max_tokens"


def test_the_meter_stops_at_the_first_response_past_a_cost():
    folder = DATA / "pi" / "success"
    # The captured run's responses cost 0.0048 each (Pi's own figure): the third passes 0.01.
    meter = UsageMeter(RunBudget(max_cost_usd=0.01), pi_live_usage)
    feed_in_pieces(meter, folder / "stdout.log", 1 << 20)
    assert meter.stop is not None
    assert (meter.stop.limit, meter.stop.responses, meter.stop.cost_usd) == ("max_cost_usd", 3, 0.0144)


def test_the_meter_sums_opencodes_steps_as_its_parser_does():
    folder = DATA / "opencode" / "success"
    metrics = parse_opencode(folder / "session.json", folder / "stdout.log")
    meter = UsageMeter(RunBudget(max_tokens=metrics.total_tokens - 1), opencode_usage)
    feed_in_pieces(meter, folder / "stdout.log", 333)
    assert meter.stop is not None and meter.stop.tokens == metrics.total_tokens
    assert meter.stop.cost_usd == metrics.cost_usd


def test_claude_codes_blocks_of_one_response_count_once():
    stdout = DATA / "claude_code" / "success" / "stdout.log"
    events = [json.loads(line) for line in stdout.read_text().splitlines() if line.startswith("{")]
    responses = {e["message"]["id"] for e in events if e.get("type") == "assistant"}
    meter = UsageMeter(RunBudget(max_tokens=1), claude_usage)
    meter.feed(stdout.read_bytes())
    assert meter.stop is not None and meter.stop.responses == 1
    meter = UsageMeter(RunBudget(max_tokens=10**9), claude_usage)
    meter.feed(stdout.read_bytes())
    assert meter.stop is None and meter.responses == len(responses) > 1


def test_a_harness_without_cost_is_priced_for_the_responses_model():
    stdout = DATA / "claude_code" / "success" / "stdout.log"
    first = next(e for e in map(json.loads, stdout.read_text().splitlines()) if e.get("type") == "assistant")
    usage, model = first["message"]["usage"], first["message"]["model"]
    meter = UsageMeter(RunBudget(max_cost_usd=1e-6), claude_usage, model="claude-sonnet-4-5")
    meter.feed(stdout.read_bytes())
    tokens = {
        "input_tokens": usage["input_tokens"],
        "output_tokens": usage["output_tokens"],
        "cache_read_tokens": usage["cache_read_input_tokens"],
        "cache_write_tokens": usage["cache_creation_input_tokens"],
    }
    expected = priced(tokens, model, None)
    assert meter.stop is not None and meter.stop.limit == "max_cost_usd" and meter.stop.responses == 1
    assert expected and meter.stop.cost_usd == pytest.approx(expected)


def test_a_response_of_an_unpriced_model_is_priced_as_the_experiments():
    message = {"role": "assistant", "model": "mock-model", "usage": {"input": 1000, "output": 100}}
    event = json.dumps({"type": "message_end", "message": message}).encode() + b"\n"
    expected = priced({"input_tokens": 1000, "output_tokens": 100}, "claude-sonnet-4-5", None)
    assert expected is not None
    unpriced = UsageMeter(RunBudget(max_cost_usd=expected / 2), pi_live_usage)
    unpriced.feed(event)
    assert unpriced.stop is None, "no price, no cost stop"
    meter = UsageMeter(RunBudget(max_cost_usd=expected / 2), pi_live_usage, model="claude-sonnet-4-5")
    meter.feed(event)
    assert meter.stop is not None and meter.stop.cost_usd == pytest.approx(expected)


def test_a_line_too_long_is_skipped_and_the_next_is_read():
    meter = UsageMeter(RunBudget(max_tokens=10), pi_live_usage)
    meter.feed(b'{"x": "' + b"a" * (MAX_LINE_BYTES + 10))
    meter.feed(b'"}\nnot json\n')
    assert meter.stop is None and meter.responses == 0
    event = {"type": "message_end", "message": {"role": "assistant", "usage": {"totalTokens": 11}}}
    meter.feed(json.dumps(event).encode() + b"\n")
    assert meter.stop is not None and meter.stop.tokens == 11


# --- the session readers, on the captured sessions of the real CLIs ---------------------------------

# (adapter, captured run, where the CLI writes its session below the directory the run watches)
SESSIONS = {
    "codex": (CodexHarness, "codex/success", "2026/12/01/rollout-2026-12-01T08-17-10-thread.jsonl"),
    "codex-0.125": (CodexHarness, "codex/versions/0.125.0", "2026/12/01/rollout-2026-12-01T08-17-10-t.jsonl"),
    "codex-0.40": (CodexHarness, "codex/versions/0.40.0", "2026/12/01/rollout-2026-12-01T08-17-10-t.jsonl"),
    "gemini": (GeminiHarness, "gemini/success", "work/chats/session-2026-12-01T08-17-2626ca67.jsonl"),
    "gemini-0.61": (GeminiHarness, "gemini/versions/0.61.0", "work/chats/session-2026-12-01T08-17-x.jsonl"),
}


def parsed(name: str) -> Metrics:
    _, run, _ = SESSIONS[name]
    parse = parse_codex if name.startswith("codex") else parse_gemini
    return parse(DATA / run / "session.jsonl", DATA / run / "stdout.log")


def session_reader(name: str) -> SessionUsage:
    usage = SESSIONS[name][0].session_usage
    assert usage is not None
    return usage


def grow(root: Path, name: str, sizes: list[int], meter: UsageMeter) -> SessionTail:
    """Write the captured session of `name` below `root` in pieces of `sizes` (cycled), as its CLI
    would, the tail reading it after each piece; the tail."""
    _, run, rel = SESSIONS[name]
    data = (DATA / run / "session.jsonl").read_bytes()
    target = root / rel
    target.parent.mkdir(parents=True)
    tail = SessionTail(root, session_reader(name), meter)
    assert tail.poll() == -1, "nothing written yet"
    start = 0
    while start < len(data):
        piece = data[start : start + sizes[start % len(sizes)]]
        with target.open("ab") as file:
            file.write(piece)
        start += len(piece)
        assert tail.poll() == start
    return tail


@pytest.mark.parametrize("name", SESSIONS)
def test_a_session_read_as_it_grows_sums_as_its_parser_does(tmp_path, name):
    metrics = parsed(name)
    assert metrics.total_tokens > 0 and metrics.assistant_messages > 1
    # Pieces that cut records anywhere; then read again and again: the usage is the same.
    at_limit = UsageMeter(RunBudget(max_tokens=metrics.total_tokens), None)
    tail = grow(tmp_path / "at", name, [97, 4096, 1], at_limit)
    for _ in range(3):
        tail.poll()
    assert at_limit.stop is None, "at the limit is not past it"
    assert at_limit.responses == metrics.assistant_messages
    past = UsageMeter(RunBudget(max_tokens=metrics.total_tokens - 1), None)
    grow(tmp_path / "past", name, [1 << 20], past)
    assert past.stop is not None and past.stop.tokens == metrics.total_tokens
    assert past.stop.responses == metrics.assistant_messages


def test_a_session_rewritten_counts_its_responses_once(tmp_path):
    metrics = parsed("gemini")
    meter = UsageMeter(RunBudget(max_tokens=metrics.total_tokens), None)
    tail = grow(tmp_path, "gemini", [1 << 20], meter)
    session = next((tmp_path / "work" / "chats").iterdir())
    # Replaced by a copy of itself (another file), then cut short and grown again.
    copy = tmp_path / "copy"
    shutil.copyfile(session, copy)
    copy.replace(session)
    tail.poll()
    data = session.read_bytes()
    session.write_bytes(data[: len(data) // 2])
    tail.poll()
    session.write_bytes(data)
    tail.poll()
    assert meter.stop is None and meter.responses == metrics.assistant_messages


def test_a_rollouts_last_line_is_read_once_complete(tmp_path):
    _, run, rel = SESSIONS["codex"]
    lines = (DATA / run / "session.jsonl").read_bytes().splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if b'"token_usage_record"' in line)
    target = tmp_path / rel
    target.parent.mkdir(parents=True)
    target.write_bytes(b"".join(lines[:first]) + lines[first][:-1])
    meter = UsageMeter(RunBudget(max_tokens=1), None)
    tail = SessionTail(tmp_path, session_reader("codex"), meter)
    tail.poll()
    assert meter.responses == 0 and meter.stop is None, "a record without its newline may be torn"
    with target.open("ab") as file:
        file.write(b"\n")
    tail.poll()
    assert meter.stop is not None and meter.stop.responses == 1


def test_a_symlinked_session_is_not_followed(tmp_path):
    _, run, rel = SESSIONS["codex"]
    rollout = DATA / run / "session.jsonl"
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copyfile(rollout, outside / "rollout-x.jsonl")
    # A link where the rollout would be, and a linked day directory holding a real rollout.
    root = tmp_path / "sessions"
    day = root / Path(rel).parent
    day.mkdir(parents=True)
    (day / Path(rel).name).symlink_to(outside / "rollout-x.jsonl")
    (day.parent / "02").symlink_to(outside, target_is_directory=True)
    meter = UsageMeter(RunBudget(max_tokens=1), None)
    assert SessionTail(root, session_reader("codex"), meter).poll() == -1
    assert meter.responses == 0
    # Nor is a watched directory that is itself a link, to a real session.
    real = tmp_path / "real" / rel
    real.parent.mkdir(parents=True)
    shutil.copyfile(rollout, real)
    linked = tmp_path / "linked"
    linked.symlink_to(tmp_path / "real", target_is_directory=True)
    assert SessionTail(linked, session_reader("codex"), meter).poll() == -1
    assert meter.responses == 0
    assert SessionTail(tmp_path / "real", session_reader("codex"), meter).poll() == real.stat().st_size
    assert meter.stop is not None, "the same session, not linked, is read"


# --- refused at config load, in one line ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("harness", "lines", "message"),
    [
        ("pi", "[run_budget]\n", "run_budget: sets no limit; set max_tokens or max_cost_usd, or remove"),
        ("pi", "[run_budget]\nmax_tokens = 0\n", "run_budget.max_tokens: Input should be greater than 0"),
        ("pi", "[run_budget]\nmax_cost_usd = -1\n", "run_budget.max_cost_usd: Input should be greater"),
        ("pi", "[run_budget]\nmax_tokens = 10\nmax_token = 5\n", "run_budget.max_token: Extra inputs"),
        (
            "claude-code",
            "[run_budget]\nmax_cost_usd = 1.0\n",
            "'claude-code' reports no cost while it runs and genai-prices has no price for model None",
        ),
    ],
)
def test_a_budget_that_cannot_hold_is_refused_at_load(tmp_path, harness, lines, message):
    config = tmp_path / "exp.toml"
    config.write_text(f'harness = "{harness}"\n\n{lines}\n[[conditions]]\nname = "arm"\n')
    with pytest.raises(ExperimentError) as caught:
        load_experiment(config)
    text = str(caught.value)
    assert message in text and "\n" not in text and text.startswith(str(config))


@pytest.mark.parametrize("harness", ["codex", "gemini"])
def test_a_harness_read_from_its_session_takes_a_token_budget(tmp_path, harness):
    config = tmp_path / "exp.toml"
    config.write_text(
        f'harness = "{harness}"\n\n[run_budget]\nmax_tokens = 1000\n\n[[conditions]]\nname = "arm"\n'
    )
    assert load_experiment(config).run_budget == RunBudget(max_tokens=1000)


def test_a_priced_model_lets_claude_code_take_a_cost_budget(tmp_path):
    config = tmp_path / "exp.toml"
    config.write_text(
        'harness = "claude-code"\nmodel = "claude-sonnet-4-5"\n\n[run_budget]\nmax_cost_usd = 0.5\n\n'
        '[[conditions]]\nname = "arm"\n'
    )
    assert load_experiment(config).run_budget == RunBudget(max_cost_usd=0.5)


# --- the real CLIs against the mock model -----------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("harness", BUDGETED)
def test_a_real_cli_is_stopped_once_past_its_budget(harness, task, workspace, tmp_path):
    run_dir = tmp_path / "run"
    limit = 5000
    run = run_with_budget(harness, task, workspace, run_dir, RunBudget(max_tokens=limit), LONG)

    stop = run.budget
    assert stop is not None and stop.limit == "max_tokens" and stop.allowed == limit
    assert run.exit_code is None and not run.timed_out and not run.stalled
    served = ledger_usage(run_dir)
    # Stopped after a few responses of the many the policy has: past the limit by one response at most.
    assert 1 < stop.responses < STEPS
    assert limit < stop.tokens <= limit + max(served)
    assert len(served) < RESPONSES, "the mock served fewer responses than the run takes to its end"
    assert processes_in(workspace) == []
    # Usage read from stdout stops the agent before its tool runs; a session is read up to
    # WATCH_INTERVAL_S after it grew, so the kill may land a request later, or while a tool command
    # runs in a process session of its own (Codex's), which the reaper then kills and counts.
    if adapter_class(harness).live_usage is not None:
        assert len(served) <= stop.responses + 1, "at most the request in flight was answered after the stop"
        assert run.leftover_processes == 0
    adapter = adapter_class(harness)(task, Provider(), None, None, STALL_S)
    # The kill can land before the harness saves the responses it streamed: then the metrics say so.
    metrics = session_metrics(adapter, run, task)
    assert metrics.total_tokens >= stop.tokens or (
        not metrics.complete and f"after {stop.tokens} tokens streamed" in metrics.gaps[-1]
    )


def test_a_session_behind_the_streamed_usage_is_incomplete() -> None:
    stop = BudgetStop(limit="max_tokens", allowed=5000, tokens=6450, cost_usd=None, responses=3)
    behind = Metrics(total_tokens=4300)
    reconcile(behind, stop)
    assert not behind.complete
    assert behind.gaps == [
        "stopped at the run budget after 6450 tokens streamed, of which the session holds 4300: the "
        "responses it did not save are missing from the totals"
    ]
    whole = Metrics(total_tokens=6450)
    reconcile(whole, stop)
    assert whole.complete and whole.gaps == []


@pytest.mark.slow
@pytest.mark.parametrize("harness", BUDGETED)
def test_a_run_under_its_budget_is_unaffected(harness, task, workspace, tmp_path):
    run_dir = tmp_path / "run"
    run = run_with_budget(harness, task, workspace, run_dir, RunBudget(max_tokens=10**6), LONG)
    assert run.budget is None and run.exit_code == 0
    assert len(ledger_usage(run_dir)) == RESPONSES


# --- through `rig run` and `rig report` --------------------------------------------------------------

CONFIG = """harness = "pi"
tasks = ["t1_fix_pagination"]
seed = 1

[run_budget]
max_tokens = 5000

[timeouts]
agent_s = 120
stall_s = 30

[[conditions]]
name = "long"
harness_options = {options}

[[conditions]]
name = "short"
harness_options = {{ mock_policy = "nothing" }}
"""


def rig(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RIG_RESULTS_ROOT": str(tmp / "results"), "RIG_RUNS_ROOT": str(tmp / "runs")}
    return subprocess.run([RIG, *args], capture_output=True, text=True, timeout=600, env=env)


@pytest.mark.slow
def test_a_budget_stop_is_the_agents_failure_and_the_report_counts_it(tmp_path):
    commands = ", ".join(f'"echo {n}"' for n in range(STEPS))
    options = f'{{ mock_policy = "commands", commands = [{commands}] }}'
    config = tmp_path / "budgeted.toml"
    config.write_text(CONFIG.format(options=options))
    dry = rig(tmp_path, "run", str(config), "--dry-run")
    assert "run budget: max_tokens = 5000 (each run's agent is stopped once past it)" in dry.stdout
    proc = rig(tmp_path, "run", str(config))
    assert proc.returncode == 0, proc.stderr
    folder = tmp_path / "results" / "budgeted"
    assert not (folder / "quarantine.jsonl").exists() or not (folder / "quarantine.jsonl").read_text()
    records = {r["condition"]: r for r in map(json.loads, (folder / "runs.jsonl").read_text().splitlines())}

    long, short = records["long"], records["short"]
    assert (long["success"], long["failing_stage"], long["infra"]["is_infra"]) == (False, "budget", False)
    stop = long["agent"]["budget"]
    assert stop["limit"] == "max_tokens" and 5000 < stop["tokens"]
    # Under load the kill can land before Pi saves the last responses; then the totals say so.
    saved = long["metrics"]["total_tokens"]
    assert stop["tokens"] <= saved or (
        not long["metrics"]["complete"]
        and any(
            f"{stop['tokens']} tokens streamed, of which the session holds {saved}" in g
            for g in long["metrics"]["gaps"]
        )
    ), long["metrics"]
    assert long["metrics"]["cost_usd"] > 0
    assert short["agent"]["budget"] is None and short["failing_stage"] != "budget"

    report = rig(tmp_path, "report", str(config), "--out", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    text = (tmp_path / "report" / "report.md").read_text()
    header = next(line for line in text.splitlines() if line.startswith("| condition | runs | ran the gate"))
    column = [c.strip() for c in header.split("|")].index("stopped at the run budget")
    rows = {
        cells[1]: cells[column]
        for line in text.splitlines()
        if line.startswith("| `") and len(cells := [c.strip() for c in line.split("|")]) > column
    }
    assert rows["`long`"] == "100% (1/1)" and rows["`short`"] == "0% (0/1)"
    # The spent cost includes the stopped run.
    spent = long["metrics"]["cost_usd"] + (short["metrics"]["cost_usd"] or 0)
    assert f"spent: ${spent:.4f} over 2 attempts" in text
