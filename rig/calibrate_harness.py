"""`rig calibrate --harness`: each real CLI, driven by the mock model, must behave as the rig expects.

Per task: the mock replaying the reference solution must make a success, and the tokens and tool
calls parsed from the harness's own logs must equal the mock's ledger; doing nothing must fail
(and not as infrastructure). Once per harness: a dead server, HTTP 500 and a silent stream must
each be classified as infrastructure failures. Every check is a real run through the pipeline.
"""

import json
import shutil
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from harnesses.mock_model.session import LEDGER_FILE
from rig.models import Condition, Experiment, HarnessCheck, PlanItem, Provider, Task, Timeouts
from rig.runner import make_context, run_one
from rig.schedule import run_id

FAULT_TASK = "t1_fix_pagination"
STALL_S = 20.0
AGENT_TIMEOUT_S = 300
FAULTS: dict[str, dict[str, Any]] = {
    "server_down": {"mode": "down"},
    "http_500": {"mode": "http_error", "status": 500},
    "stall": {"mode": "silence"},
}


def _checks(tasks: list[Task]) -> list[tuple[str, str, dict[str, Any]]]:
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
    return True, f"success; tokens {parsed} and tool calls {tools} equal the mock's ledger"


def calibrate_harness(
    harness: str,
    tasks: list[Task],
    repo_root: Path,
    workers: int,
    on_result: Callable[[HarnessCheck], None] | None = None,
) -> list[HarnessCheck]:
    """Run every check of one harness through the real pipeline, in a throwaway results folder."""
    checks = _checks(tasks)
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
    scratch = Path(tempfile.mkdtemp(prefix=f"rig-calibrate-{harness}-"))
    try:
        ctx = make_context(experiment, tasks, scratch / "results", scratch / "runs", repo_root)

        def one(check: tuple[str, str, dict[str, Any]]) -> HarnessCheck:
            name, task_id, _options = check
            condition = name.replace(" ", "_")
            item = PlanItem(
                run_id=run_id(task_id, condition, 1), task=task_id, condition=condition, repetition=1
            )
            record, folder = run_one(item, ctx)
            passed, reason = judge(name, record, folder)
            return HarnessCheck(harness=harness, name=name, passed=passed, reason=reason)

        results = []
        try:
            with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
                for result in pool.map(one, checks):
                    results.append(result)
                    if on_result:
                        on_result(result)
        finally:
            ctx.scratch.close()
        return results
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
