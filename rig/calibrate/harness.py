"""`rig calibrate --harness`: each real CLI, driven by the mock model, must behave as the rig expects.

Per task: the mock replaying the reference solution must make a success, and the tokens and tool
calls parsed from the harness's own logs must equal the mock's ledger; doing nothing must fail
(and not as infrastructure). Once per harness: a dead server, HTTP 500 and a silent stream must
each be classified as infrastructure failures. Every check is a real run through the pipeline.
"""

import json
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from harnesses.mock_model.session import LEDGER_FILE
from harnesses.registry import adapter_class
from rig.experiment.plan import run_id
from rig.run.runner import RunContext, make_context, run_one
from rig.schema import Condition, Experiment, HarnessCheck, PlanItem, Provider, Task, Timeouts

FAULT_TASK = "t1_fix_pagination"
STALL_S = 20.0
AGENT_TIMEOUT_S = 300
FAULTS: dict[str, dict[str, Any]] = {
    "server_down": {"mode": "down"},
    "http_500": {"mode": "http_error", "status": 500},
    "stall": {"mode": "silence"},
}
# The fault checks mostly idle (a stall waits STALL_S of silence, a CLI may retry a dead server for
# a minute), so they run beside the CPU-bound solution and nothing checks, which `--workers`
# bounds, in a pool of their own: this many per worker. Bounded all the same, and started
# START_GAP_S apart (a CLI takes seconds of CPU to start): a CLI starved of CPU long enough would
# look stalled to the watchdog.
WAITING_PER_WORKER = 3
START_GAP_S = 2.0


Check = tuple[str, str, dict[str, Any]]
"""A check's name, its task's id and the harness_options of its run."""


def _checks(tasks: list[Task]) -> list[Check]:
    """(check name, task id, harness_options) for every check of one harness."""
    checks = []
    for task in tasks:
        checks.append((f"{task.id} solution", task.id, {"mock_policy": "solution"}))
        checks.append((f"{task.id} nothing", task.id, {"mock_policy": "nothing"}))
    fault_task = FAULT_TASK if any(t.id == FAULT_TASK for t in tasks) else tasks[0].id
    for name, faults in FAULTS.items():
        checks.append((name, fault_task, {"mock_policy": "solution", "mock_faults": faults}))
    return checks


def _ledger_totals(folder: Path) -> tuple[dict[str, int], dict[str, int]]:
    entries = json.loads((folder / LEDGER_FILE).read_text())["ledger"]
    served = [e for e in entries if e["outcome"] == "served"]
    totals = {
        key: sum(e["usage"][key] for e in served) for key in ("input", "output", "cache_read", "cache_write")
    }
    tools: dict[str, int] = {}
    for entry in served:
        if entry["tool"]:
            tools[entry["tool"]] = tools.get(entry["tool"], 0) + 1
    return totals, tools


def judge(name: str, record: dict, folder: Path) -> tuple[bool, str]:
    """The verdict of one check from its run record and artifacts."""
    infra = record["infra"]
    if name in FAULTS:
        if infra["rule"] == "rig_error":
            # The rig failing is no proof that the harness's failure was recognised.
            return False, f"the rig itself failed ({infra['detail']})"
        if infra["is_infra"]:
            return True, f"infrastructure failure, rule {infra['rule']} ({record['wall_s']:.0f}s)"
        return (
            False,
            f"not classified as infrastructure (success={record['success']}, {record['wall_s']:.0f}s)",
        )
    if infra["is_infra"]:
        return False, f"classified as infrastructure ({infra['rule']}: {infra['detail']})"
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
    totals, tools = _ledger_totals(folder)
    parsed = {
        "input": metrics["input_tokens"],
        "output": metrics["output_tokens"],
        "cache_read": metrics["cache_read_tokens"],
        "cache_write": metrics["cache_write_tokens"],
    }
    if parsed != totals or metrics["tool_calls_by_name"] != tools:
        return False, (
            f"parsed tokens {parsed} and tools {metrics['tool_calls_by_name']} differ from the ledger "
            f"{totals} and {tools}"
        )
    reason = f"success; tokens {parsed} and tool calls {tools} equal the mock's ledger"
    network = record.get("network") or {}
    if network.get("active"):
        reached = sum(e["connections"] for e in network["reached"])
        if not reached:
            return False, f"{reason}, but no connection went through the rig's egress proxy"
        refused = sum(e["connections"] for e in network["refused"])
        reason += f"; {reached} connections to the model through the egress proxy, {refused} refused"
    return True, reason


def _retries_s(harness: str) -> float:
    """About how long `harness`'s CLI retries a dead or erroring provider (none if its adapter does
    not say)."""
    return adapter_class(harness).provider_retries_s


def _wait_s(name: str, retries_s: float) -> float:
    """Roughly how long check `name` idles: a stall until the rig's silence watchdog, a dead or
    erroring server as long as the CLI retries it, a solution or nothing check not at all."""
    if name == "stall":
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
            Condition(name=name.replace(" ", "_"), harness_options=options) for name, _task, options in checks
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
    passed, reason = judge(name, record, folder)
    return HarnessCheck(harness=harness, name=name, passed=passed, reason=reason)


def calibrate_harnesses(
    harnesses: Sequence[str],
    tasks: list[Task],
    repo_root: Path,
    workers: int,
    on_result: Callable[[HarnessCheck], None] | None = None,
) -> list[HarnessCheck]:
    """Run every check of each of `harnesses` through the real pipeline, side by side, each harness
    in a throwaway results folder; return (and pass to `on_result`) the results grouped by harness
    in the order given, each harness's checks in `_checks` order.

    Every harness's context is made before any check runs, so a CLI that cannot be found
    (CliNotFound) ends the calibration before it starts.
    """
    checks = _checks(tasks)
    workers = max(1, workers)
    waiting_slots = WAITING_PER_WORKER * workers
    with ExitStack() as stack:
        # Every check in flight may hold a verification copy in memory: the room of one
        # (rig.workspace.scratch) is a share of what is free among all of them.
        contexts = {h: _open(stack, h, checks, tasks, repo_root, workers + waiting_slots) for h in harnesses}
        busy = ThreadPoolExecutor(max_workers=workers)
        waiting = ThreadPoolExecutor(max_workers=waiting_slots)
        # Shut down before the contexts close; an error or interrupt drops the checks not started.
        stack.callback(busy.shutdown, cancel_futures=True)
        stack.callback(waiting.shutdown, cancel_futures=True)
        spacing = _Spacing(START_GAP_S)

        def spaced(harness: str, check: Check) -> HarnessCheck:
            spacing.wait()
            return _run_check(harness, contexts[harness], check)

        retries = {h: _retries_s(h) for h in harnesses}
        # The longest waits start first, so that none starts last and holds up the end: the checks
        # that idle longest, and among equals those of the harness whose CLI retries longest (the
        # slowest); the sort is stable, so the report's order breaks the remaining ties.
        starts = [(h, i) for h in harnesses for i in range(len(checks))]
        starts.sort(key=lambda hi: (-_wait_s(checks[hi[1]][0], retries[hi[0]]), -retries[hi[0]]))
        futures: dict[tuple[str, int], Future[HarnessCheck]] = {}
        for harness, index in starts:
            if checks[index][0] in FAULTS:
                futures[harness, index] = waiting.submit(spaced, harness, checks[index])
            else:
                futures[harness, index] = busy.submit(_run_check, harness, contexts[harness], checks[index])
        results = []
        # Waiting in the report's order keeps the output stable while checks finish in any order.
        for harness in harnesses:
            for index in range(len(checks)):
                results.append(futures[harness, index].result())
                if on_result:
                    on_result(results[-1])
        return results
