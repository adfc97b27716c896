"""`rig calibrate --harness`: each real CLI, driven by the mock model, must behave as the rig expects.

It is the harnesses' conformance suite: every check runs for every calibrated harness, so a harness
added later is held to all of them. Per task: the mock replaying the reference solution must make a
success, and every token figure (input, output, cache read, cache write, reasoning) and tool call
parsed from the harness's own logs must equal the mock's ledger, per model, as the adapter declares
it reads them (`usage_fields`, `usage_folds`: a figure it does not read must be 0 and noted as a
gap); a harness that declares a thinking level must ask the model for it in every request (the
ledger reads it from the request as the provider would); doing nothing must fail (and not as
infrastructure). Once per harness: a dead server, HTTP 500, 429 and 529, a silent stream, a cut
stream and a request never answered must each be classified as infrastructure, and a tool call that
never returns as the agent's hang; a CLI its own hook or plugin keeps alive and silent after its
final answer (the adapter's `silent_after_final`) must be ended after `[timeouts] after_final_s`
and scored on its work. Every check is a real run through the pipeline.
"""

import contextlib
import json
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from harnesses.capabilities import USAGE_FIELDS
from harnesses.mock_model.session import LEDGER_FILE
from harnesses.registry import adapter_class
from rig.confine.agent import kill_running_agents
from rig.confine.proc import ContainmentError, kill_running_commands
from rig.experiment.plan import run_id
from rig.run.runner import RunContext, make_context, run_one
from rig.schema import RIG_SIDE_RULES, Condition, Experiment, HarnessCheck, PlanItem, Provider, Task, Timeouts

FAULT_TASK = "t1_fix_pagination"
STALL_S = 20.0
# Ample for a solution run; a harness that loops on a failing provider (OpenCode on cut streams)
# ends here, as infrastructure.
AGENT_TIMEOUT_S = 120
# A Retry-After (and retry-after-ms) of 0 with every HTTP error: a harness whose own retries cannot
# be turned off (OpenCode) honours it, so its retries cost nothing.
FAULTS: dict[str, dict[str, Any]] = {
    "server_down": {"mode": "down"},
    "http_500": {"mode": "http_error", "status": 500, "retry_after_s": 0},
    "http_429": {"mode": "http_error", "status": 429, "retry_after_s": 0},
    "http_529": {"mode": "http_error", "status": 529, "retry_after_s": 0},
    "stall": {"mode": "silence"},
    "cut_stream": {"mode": "cut_stream"},
    "never_answer": {"mode": "never_answer"},
}
# Silent from the start, like the stall: the watchdog ends them.
SILENT = frozenset({"stall", "never_answer", "tool_hang"})
# A tool call that never returns: the agent's own hang, never infrastructure.
# Not `sleep`: Claude Code refuses a standalone long sleep.
TOOL_HANG: dict[str, Any] = {"mock_policy": "commands", "commands": ["tail -f /dev/null"]}
# Every figure nonzero, so that a figure a harness drops or misplaces shows.
# The thinking level of the solution checks, not the CLIs' default, so that a level lost on the way
# to the request shows.
THINKING = "high"
SOLUTION_USAGE = dict(zip(USAGE_FIELDS, (1000, 100, 500, 40, 20), strict=True))
# The fault checks mostly idle (a stall waits STALL_S of silence, a CLI may retry a dead server for
# a minute), so they run beside the CPU-bound solution and nothing checks, which `--workers`
# bounds, in a pool of their own: this many per worker. Bounded all the same, and started
# START_GAP_S apart (a CLI takes seconds of CPU to start): a CLI starved of CPU long enough would
# look stalled to the watchdog.
WAITING_PER_WORKER = 3
START_GAP_S = 2.0


AFTER_FINAL = "silent_after_final"
"""The check of a harness that declares how it stays alive and silent after its final answer."""

Check = tuple[str, str, dict[str, Any]]
"""A check's name, its task's id and the condition fields of its run (harness_options, and any
other field of a Condition)."""


def checks_of(harness: str, tasks: list[Task], tasks_only: bool = False) -> list[Check]:
    """(check name, task id, condition fields) for every check of `harness`: the solution and
    nothing checks per task, then, unless `tasks_only`, the faults and the tool hang, and where the
    adapter declares how its CLI goes silent after answering (`silent_after_final`), that check:
    checks of the harness that no pack changes."""
    checks = []
    for task in tasks:
        solution = {"mock_policy": "solution", "mock_usage": SOLUTION_USAGE}
        checks.append((f"{task.id} solution", task.id, {"harness_options": solution}))
        checks.append((f"{task.id} nothing", task.id, {"harness_options": {"mock_policy": "nothing"}}))
    if tasks_only:
        return checks
    fault_task = FAULT_TASK if any(t.id == FAULT_TASK for t in tasks) else tasks[0].id
    for name, faults in FAULTS.items():
        checks.append(
            (name, fault_task, {"harness_options": {"mock_policy": "solution", "mock_faults": faults}})
        )
    checks.append(("tool_hang", fault_task, {"harness_options": TOOL_HANG}))
    silent = adapter_class(harness).silent_after_final
    if silent is not None:
        options = {"mock_policy": "solution", **silent.get("harness_options", {})}
        checks.append((AFTER_FINAL, fault_task, {**silent, "harness_options": options}))
    return checks


def _ledger(folder: Path) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """The served responses' tokens per model and tool calls by name, from the mock's saved ledger."""
    entries = json.loads((folder / LEDGER_FILE).read_text())["ledger"]
    served = [e for e in entries if e["outcome"] == "served"]
    models: dict[str, dict[str, int]] = {}
    for entry in served:
        totals = models.setdefault(str(entry.get("model")), dict.fromkeys(USAGE_FIELDS, 0))
        for key in USAGE_FIELDS:
            totals[key] += entry["usage"][key]
    tools: dict[str, int] = {}
    for entry in served:
        if entry["tool"]:
            tools[entry["tool"]] = tools.get(entry["tool"], 0) + 1
    return models, tools


def expected_usage(harness: str, served: dict[str, int]) -> dict[str, int]:
    """What `harness`'s parser must read of `served` tokens: each figure it reads (`usage_fields`)
    plus those it counts inside it (`usage_folds`), 0 for a figure it does not read."""
    cls = adapter_class(harness)
    expected = {key: served[key] if key in cls.usage_fields else 0 for key in USAGE_FIELDS}
    for folded, into in cls.usage_folds.items():
        if folded not in cls.usage_fields:
            expected[into] += served[folded]
    return expected


def _parsed(usage: dict) -> dict[str, int]:
    return {key: usage[f"{key}_tokens"] for key in USAGE_FIELDS}


def _usage_problem(harness: str, metrics: dict, folder: Path) -> str | None:
    """How the parsed tokens and tool calls differ from the mock's ledger (total and per model), or
    None; a figure the harness does not read must be named among the record's gaps."""
    models, tools = _ledger(folder)
    served = {key: sum(m[key] for m in models.values()) for key in USAGE_FIELDS}
    expected = expected_usage(harness, served)
    if _parsed(metrics) != expected or metrics["tool_calls_by_name"] != tools:
        return (
            f"parsed tokens {_parsed(metrics)} and tools {metrics['tool_calls_by_name']} differ from "
            f"the ledger's {expected} (as {harness} reads it) and {tools}"
        )
    # Per model by figures, not names: a session may name the mock's model with its provider
    # (`mock/mock-model`) where the request named it alone.
    per_model = sorted(tuple(_parsed(usage).values()) for usage in (metrics.get("per_model") or {}).values())
    wanted = sorted(tuple(expected_usage(harness, usage).values()) for usage in models.values())
    if per_model != wanted:
        return (
            f"tokens per model {metrics.get('per_model')} differ from the ledger's "
            f"{ {name: expected_usage(harness, usage) for name, usage in models.items()} }"
        )
    unread = [key for key in USAGE_FIELDS if key not in adapter_class(harness).usage_fields and served[key]]
    if unread and not metrics["gaps"]:
        return f"{', '.join(unread)} tokens were served, read as 0, and the record names no gap"
    return None


def judge(harness: str, name: str, record: dict, folder: Path) -> tuple[bool, str]:
    """The verdict of one check of `harness` from its run record and artifacts."""
    infra = record["infra"]
    if name in FAULTS:
        if infra["rule"] in RIG_SIDE_RULES:
            # The rig failing (or its disk) is no proof that the harness's failure was recognised.
            return False, f"the rig itself failed ({infra['rule']}: {infra['detail']})"
        if infra["is_infra"]:
            return True, f"infrastructure failure, rule {infra['rule']} ({record['wall_s']:.0f}s)"
        return (
            False,
            f"not classified as infrastructure (success={record['success']}, {record['wall_s']:.0f}s)",
        )
    if infra["is_infra"]:
        return False, f"classified as infrastructure ({infra['rule']}: {infra['detail']})"
    if name == "tool_hang":
        if record.get("hang") != "agent_hang" or record["success"]:
            return False, f"not the agent's hang (hang={record.get('hang')}, success={record['success']})"
        return True, f"the agent's hang, scored as a failure ({record['wall_s']:.0f}s)"
    if name == AFTER_FINAL:
        if not record["agent"].get("ended_after_final") or record.get("hang"):
            return False, (
                f"not ended after its final answer (hang={record.get('hang')}, "
                f"exit code {record['agent'].get('exit_code')}, {record['wall_s']:.0f}s)"
            )
        if not record["success"]:
            return False, f"ended after its final answer, but its work failed at {record['failing_stage']}"
        return True, f"ended after its final answer, scored on its work: success ({record['wall_s']:.0f}s)"
    if name.endswith("nothing"):
        if record["success"]:
            return False, "doing nothing PASSED verification"
        return True, f"fails as it should (at {record['failing_stage']})"
    if not record["success"]:
        hidden = (record.get("hidden") or {}).get("failed") or []
        errors = [e for e in (record["metrics"].get("error_messages") or []) if e][:1]
        evidence = "; ".join([*(f"hidden {t}" for t in hidden[:3]), *record["warnings"], *errors])
        return (
            False,
            f"reference solution failed at {record['failing_stage']}: {evidence or 'see its record'}",
        )
    metrics = record["metrics"]
    problem = _usage_problem(harness, metrics, folder) or _thinking_problem(harness, name, folder)
    if problem:
        return False, problem
    reason = (
        f"success; tokens {_parsed(metrics)} per model and tool calls {metrics['tool_calls_by_name']} "
        "equal the mock's ledger"
    )
    if _thinks(harness, name):
        reason += f"; every request asked for thinking {THINKING!r}"
    network = record.get("network") or {}
    if network.get("active"):
        reached = sum(e["connections"] for e in network["reached"])
        if not reached:
            return False, f"{reason}, but no connection went through the rig's egress proxy"
        refused = sum(e["connections"] for e in network["refused"])
        reason += f"; {reached} connections to the model through the egress proxy, {refused} refused"
    return True, reason


def _thinks(harness: str, check: str) -> bool:
    """Whether `check` of `harness` runs with a thinking level: a solution check of a harness that
    declares one."""
    return check.endswith(" solution") and adapter_class(harness).factors.thinking is not None


def _thinking_problem(harness: str, name: str, folder: Path) -> str | None:
    """How the thinking the CLI asked the model for in check `name` differs from the run's level,
    or None."""
    if not _thinks(harness, name):
        return None
    entries = json.loads((folder / LEDGER_FILE).read_text())["ledger"]
    asked = sorted({str(e.get("thinking")) for e in entries if e["outcome"] == "served"})
    if asked != [THINKING]:
        return f"ran with thinking {THINKING!r}, but its requests to the model asked for {', '.join(asked)}"
    return None


def _retries_s(harness: str) -> float:
    """About how long `harness`'s CLI retries a dead or erroring provider (none if its adapter does
    not say)."""
    return adapter_class(harness).provider_retries_s


def _wait_s(name: str, retries_s: float) -> float:
    """Roughly how long check `name` idles: a stall until the rig's silence watchdog, a dead or
    erroring server as long as the CLI retries it, a solution or nothing check not at all."""
    if name in SILENT:
        return STALL_S
    return retries_s if name in FAULTS else 0.0


def _open(
    stack: ExitStack, harness: str, checks: list[Check], tasks: list[Task], repo_root: Path, workers: int
) -> RunContext:
    """The run context of `harness`'s checks in a throwaway results folder, removed when `stack`
    closes. Raises CliNotFound if its CLI cannot be found."""
    scratch = Path(tempfile.mkdtemp(prefix=f"rig-calibrate-{harness}-"))
    stack.callback(shutil.rmtree, scratch, ignore_errors=True)
    experiment = Experiment(
        name=f"calibrate-{harness}",
        harness=harness,
        provider=Provider(kind="mock"),
        tasks=[t.id for t in tasks],
        conditions=[
            Condition(
                name=name.replace(" ", "_"), thinking=THINKING if _thinks(harness, name) else None, **fields
            )
            for name, _task, fields in checks
        ],
        workers=workers,
        timeouts=Timeouts(agent_s=AGENT_TIMEOUT_S, stall_s=STALL_S),
    )
    ctx = make_context(experiment, tasks, scratch / "results", scratch / "runs", repo_root)
    stack.callback(ctx.scratch.close)
    return ctx


class _Spacing:
    """Lets callers go at least `gap_s` apart."""

    def __init__(self, gap_s: float) -> None:
        self._gap_s = gap_s
        self._lock = threading.Lock()
        self._next = 0.0

    def wait(self) -> None:
        """Return once `gap_s` has passed since the previous caller went."""
        with self._lock:
            time.sleep(max(0.0, self._next - time.monotonic()))
            self._next = time.monotonic() + self._gap_s


def _run_check(harness: str, ctx: RunContext, check: Check) -> HarnessCheck:
    name, task_id, _options = check
    condition = name.replace(" ", "_")
    item = PlanItem(run_id=run_id(task_id, condition, 1), task=task_id, condition=condition, repetition=1)
    record, folder = run_one(item, ctx)
    passed, reason = judge(harness, name, record, folder)
    return HarnessCheck(harness=harness, name=name, passed=passed, reason=reason)


def _stop_running(kind: type[BaseException] | None, contexts: Iterable[RunContext]) -> bool:
    """On an interrupt, end every check in flight: runs stop at their next step, their agents and
    verification commands are killed. Never swallows the exception."""
    if kind is not None and issubclass(kind, KeyboardInterrupt):
        for ctx in contexts:
            ctx.stopping.set()
        kill_running_commands()
        with contextlib.suppress(ContainmentError):
            kill_running_agents()
    return False


def calibrate_harnesses(
    harnesses: Sequence[str],
    tasks: list[Task],
    repo_root: Path,
    workers: int,
    on_result: Callable[[HarnessCheck], None] | None = None,
    tasks_only: bool = False,
) -> list[HarnessCheck]:
    """Run every check of each of `harnesses` (each task's alone if `tasks_only`) through the real
    pipeline, side by side, each harness in a throwaway results folder; return (and pass to
    `on_result`) the results grouped by harness in the order given, each harness's checks in
    `checks_of` order.

    Every harness's context is made before any check runs, so a CLI that cannot be found
    (CliNotFound) ends the calibration before it starts.
    """
    checks = {h: checks_of(h, tasks, tasks_only) for h in harnesses}
    workers = max(1, workers)
    waiting_slots = WAITING_PER_WORKER * workers
    with ExitStack() as stack:
        # Every check in flight may hold a verification copy in memory: the room of one
        # (rig.workspace.scratch) is a share of what is free among all of them.
        contexts = {
            h: _open(stack, h, checks[h], tasks, repo_root, workers + waiting_slots) for h in harnesses
        }
        busy = ThreadPoolExecutor(max_workers=workers)
        waiting = ThreadPoolExecutor(max_workers=waiting_slots)
        # Shut down before the contexts close; an error or interrupt drops the checks not started.
        stack.callback(busy.shutdown, cancel_futures=True)
        stack.callback(waiting.shutdown, cancel_futures=True)
        # Run first: on Ctrl-C or SIGTERM, the checks running end now, not at their timeouts.
        stack.push(lambda kind, _exc, _tb: _stop_running(kind, contexts.values()))
        spacing = _Spacing(START_GAP_S)

        def spaced(harness: str, check: Check) -> HarnessCheck:
            spacing.wait()
            return _run_check(harness, contexts[harness], check)

        retries = {h: _retries_s(h) for h in harnesses}
        # The longest waits start first, so that none starts last and holds up the end: the checks
        # that idle longest, and among equals those of the harness whose CLI retries longest (the
        # slowest); the sort is stable, so the report's order breaks the remaining ties.
        starts = [(h, i) for h in harnesses for i in range(len(checks[h]))]
        starts.sort(key=lambda hi: (-_wait_s(checks[hi[0]][hi[1]][0], retries[hi[0]]), -retries[hi[0]]))
        futures: dict[tuple[str, int], Future[HarnessCheck]] = {}
        for harness, index in starts:
            check = checks[harness][index]
            if check[0] in FAULTS or check[0] in SILENT:
                futures[harness, index] = waiting.submit(spaced, harness, check)
            else:
                futures[harness, index] = busy.submit(_run_check, harness, contexts[harness], check)
        results = []
        # Waiting in the report's order keeps the output stable while checks finish in any order.
        for harness in harnesses:
            for index in range(len(checks[harness])):
                results.append(futures[harness, index].result())
                if on_result:
                    on_result(results[-1])
        return results
