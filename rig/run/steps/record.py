"""Steps 7 and 8, decide and record: the verdict, the infrastructure classification and the record;
also the record of an attempt the rig itself failed."""

import traceback
from datetime import UTC, datetime

from harnesses.protocol import HarnessAdapter
from rig.run.steps.attempt import Attempt, Trail, write_artifact
from rig.run.steps.collect import Collected
from rig.run.steps.verify import Verified
from rig.schema import (
    AgentOutcome,
    AgentRun,
    AuditFinding,
    CheckOutcome,
    HiddenOutcome,
    InfraVerdict,
    Metrics,
    Protected,
    RunRecord,
    Tampering,
    WorkspaceStats,
)
from rig.verify.classify import DISK_FULL, classify, full_disk, hang_kind
from rig.workspace.scope import out_of_scope

TRACEBACK_FILE = "traceback.txt"


def record(
    attempt: Attempt,
    *,
    trail: Trail,
    adapter: HarnessAdapter,
    run: AgentRun,
    collected: Collected,
    tampering: Tampering,
    verified: Verified,
) -> RunRecord:
    """The record of an attempt that went through every step: success decided on exit codes and the
    audit, the agent's hang if any, the infrastructure classification, the baseline and warnings
    `trail` gathered on the way.

    A workspace past its limits was neither protected nor verified: `tampering` and `verified` are
    then empty.
    """
    pending = adapter.tool_pending(run) if run.stalled else False
    signature = adapter.infra_signature(run, collected.metrics)
    infra = classify(run, collected.metrics, signature, attempt.experiment.timeouts.stall_s, pending)
    hang = hang_kind(run, pending)
    limit = collected.workspace.limit
    spec = attempt.task.spec
    outside = out_of_scope(collected.changed, spec) if collected.diffed else None
    # A scope that could not be checked (no diff) is not passed: an enforced one fails.
    unchecked = spec.scope is not None and limit is None and not collected.diffed
    scope_failed = spec.scope_enforced and (bool(outside) or unchecked)
    success, failing_stage = _decide(
        limit, verified, collected.audit, hang, scope=scope_failed, budget=run.budget is not None
    )
    warnings = attempt.warnings() + trail.warnings
    if unchecked:
        warnings.append("scope: not checked, the diff was not collected")
    if limit is not None:
        warnings.append(f"workspace limits: {limit}; not verified")
    base = _base_record(
        attempt,
        baseline=trail.baseline,
        metrics=collected.metrics,
        workspace=collected.workspace,
        condition_mapping=adapter.condition_mapping,
    )
    return base.model_copy(
        update={
            "exit_code": run.exit_code,
            "timed_out": run.timed_out,
            "stalled": run.stalled,
            "hang": hang,
            "success": success,
            "failing_stage": failing_stage,
            "check": verified.check,
            "hidden": verified.hidden,
            "verify_error": verified.error,
            "protected": Protected(**tampering.model_dump()),
            "audit": collected.audit,
            "files_changed": collected.changed,
            "out_of_scope": outside,
            "agent": AgentOutcome(**run.model_dump(include=set(AgentOutcome.model_fields))),
            "network": run.network or attempt.network,
            "metrics": collected.metrics,
            "infra": infra,
            "warnings": warnings,
        }
    )


def rig_error_record(attempt: Attempt, *, trail: Trail, run: AgentRun | None, exc: Exception) -> RunRecord:
    """The record of an attempt the rig itself failed with `exc` (infrastructure: quarantined and
    rerun), holding what `trail` and the agent's `run` (None before it ran) had reached; the
    traceback goes in the attempt folder.

    Its rule is `disk_full`, naming the disk, when `exc` says a disk the attempt writes to was full
    (rig.verify.classify.full_disk), else `rig_error`.
    """
    detail = f"{type(exc).__name__} in step {trail.step!r}: {' '.join(str(exc).split())}"
    disk = full_disk(exc, [attempt.folder, attempt.workspaces, attempt.scratch.folder])
    if disk is not None:
        infra = InfraVerdict(
            is_infra=True, rule=DISK_FULL, detail=f"no space left on {disk} in step {trail.step!r}"
        )
    else:
        infra = InfraVerdict(is_infra=True, rule="rig_error", detail=detail)
    try:
        write_artifact(attempt.folder / TRACEBACK_FILE, "".join(traceback.format_exception(exc)))
    except OSError as write_error:
        detail += f" (traceback not saved: {write_error.strerror})"
    base = _base_record(
        attempt,
        baseline=trail.baseline,
        metrics=trail.metrics,
        workspace=trail.workspace,
        condition_mapping=None,
    )
    update: dict = {
        "rig_error": detail,
        "infra": infra,
        "warnings": attempt.warnings() + trail.warnings,
    }
    if run is not None:
        update |= {
            "exit_code": run.exit_code,
            "timed_out": run.timed_out,
            "stalled": run.stalled,
            "agent": AgentOutcome(**run.model_dump(include=set(AgentOutcome.model_fields))),
            "network": run.network or attempt.network,
        }
    return base.model_copy(update=update)


def lost_record(attempt: Attempt, *, rule: str, detail: str) -> RunRecord:
    """The record of an attempt whose Dask worker was lost while it ran (rule worker_lost) or refused
    it (worker_refused): infrastructure, quarantined and rerun, never the agent's failure."""
    base = _base_record(attempt, baseline=None, metrics=Metrics(), workspace=None, condition_mapping=None)
    return base.model_copy(
        update={
            "rig_error": detail,
            "failing_stage": rule,
            "infra": InfraVerdict(is_infra=True, rule=rule, detail=detail),
            "warnings": attempt.warnings(),
        }
    )


def _decide(
    limit: str | None,
    verified: Verified,
    audit: list[AuditFinding],
    hang: str | None,
    scope: bool = False,
    budget: bool = False,
) -> tuple[bool, str | None]:
    """Success (exit codes only, no audit finding, no hang, no stop at the run budget, no change
    outside an enforced scope) and else the first failing stage: the limits, the audit, the budget,
    the scope, then verification's."""
    passed = (
        limit is None
        and verified.error is None
        and verified.check is not None
        and verified.check.ok
        and verified.hidden is not None
        and verified.hidden.ok
    )
    if passed and not audit and hang is None and not scope and not budget:
        return True, None
    if limit is not None:
        return False, "workspace_limits"
    if budget and not audit:
        return False, "budget"
    if scope and not audit:
        return False, "scope"
    if audit or hang is None:
        return False, _failing_stage(verified.check, verified.hidden, verified.error, audit)
    return False, hang


def _failing_stage(
    check: CheckOutcome | None, hidden: HiddenOutcome | None, error: str | None, audit: list[AuditFinding]
) -> str | None:
    if audit:
        return "audit"
    if error:
        return "verify"
    if check is not None and check.failed:
        return check.failed[0]
    if hidden is None or not hidden.ok:
        return "hidden"
    return None


def _base_record(
    attempt: Attempt,
    *,
    baseline: str | None,
    metrics: Metrics,
    workspace: WorkspaceStats | None,
    condition_mapping: str | None,
) -> RunRecord:
    """The fields every record has, whatever step the attempt reached."""
    exp, item, task, condition = attempt.experiment, attempt.item, attempt.task, attempt.condition
    finished = datetime.now(UTC)
    return RunRecord(
        experiment=exp.name,
        run_id=item.run_id,
        attempt=attempt.number,
        task=task.id,
        hypothesis=task.spec.hypothesis,
        condition=condition.name,
        repetition=item.repetition,
        harness=exp.harness,
        harness_version=attempt.pins.harness_version,
        model=exp.model,
        thinking=condition.thinking or exp.thinking,
        condition_mapping=condition_mapping,
        started_at=attempt.started,
        finished_at=finished,
        wall_s=round((finished - attempt.started).total_seconds(), 3),
        exit_code=None,
        timed_out=False,
        stalled=False,
        success=False,
        failing_stage="rig_error",
        check=None,
        hidden=None,
        protected=Protected(restored=False),
        sandbox=attempt.sandbox,
        network=attempt.network,
        workspace=workspace,
        agent=AgentOutcome(command=[], exit_code=None, timed_out=False, stalled=False, wall_s=0.0),
        metrics=metrics,
        infra=InfraVerdict(),
        pins=attempt.pins.model_copy(update={"baseline_commit": baseline}),
        artifacts=attempt.artifacts,
    )
