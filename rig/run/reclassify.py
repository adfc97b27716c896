"""Re-deriving metrics and infra verdicts of stored runs with the current parsers and rules.

Nothing changes unless asked: `rig reclassify EXP` only reports; `--write` moves records that
the current rules call infrastructure failures out of the scored set (into quarantine, where
they are rerun) and brings back quarantined runs that the rules now score.
"""

from harnesses.registry import adapter_for
from rig.run.runner import RunContext
from rig.run.steps.collect import session_metrics
from rig.schema import RIG_SIDE_RULES, Change
from rig.store.migrate import read_quarantine, read_runs
from rig.store.transcripts import saved_run
from rig.verify.classify import classify, hang_kind


def _rederive(ctx: RunContext, record: dict) -> dict:
    exp = ctx.experiment
    task = ctx.tasks[record["task"]]
    adapter = adapter_for(exp, task)
    run = saved_run(record, ctx.store.root / record["artifacts"])
    metrics = session_metrics(adapter, run, task)
    pending = adapter.tool_pending(run) if run.stalled else False
    infra = classify(run, metrics, adapter.infra_signature(run, metrics), exp.timeouts.stall_s, pending)
    hang = hang_kind(run, pending)
    new = {
        **record,
        "metrics": ctx.redactor.value(metrics.model_dump(mode="json")),
        "infra": infra.model_dump(mode="json"),
        "hang": hang,
    }
    # As the runner decides: a hang is the agent's failure unless an earlier verdict names another.
    if hang and record.get("failing_stage") not in ("audit", "workspace_limits", "scope"):
        new["success"], new["failing_stage"] = False, hang
    return new


def reclassify(ctx: RunContext, write: bool) -> list[Change]:
    """Every stored record whose metrics or verdict the current code would change."""
    store = ctx.store
    store.repair()
    runs, quarantine = read_runs(store), read_quarantine(store)
    changes: list[Change] = []
    kept, moved_out = [], []
    for source, records in (("runs", runs), ("quarantine", quarantine)):
        for record in records:
            # An attempt the rig or its worker failed has no agent outcome to re-derive from.
            if record["task"] not in ctx.tasks or record["infra"]["rule"] in RIG_SIDE_RULES:
                if source == "runs":
                    kept.append(record)
                continue
            new = _rederive(ctx, record)
            old_rule = record["infra"]["rule"] if record["infra"]["is_infra"] else None
            new_rule = new["infra"]["rule"] if new["infra"]["is_infra"] else None
            metrics_changed = new["metrics"] != record["metrics"]
            if old_rule != new_rule or metrics_changed:
                changes.append(
                    Change(
                        run_id=record["run_id"],
                        attempt=record["attempt"],
                        source=source,
                        old_rule=old_rule,
                        new_rule=new_rule,
                        metrics_changed=metrics_changed,
                    )
                )
            if source == "runs":
                (moved_out if new_rule else kept).append(new)
            elif new_rule is None:
                moved_out.append(new)
    if write and changes:
        scored = {r["run_id"] for r in kept}
        back = [r for r in moved_out if not r["infra"]["is_infra"] and r["run_id"] not in scored]
        latest = {r["run_id"]: r for r in sorted(back, key=lambda r: r["attempt"])}
        store.rewrite_runs(kept + list(latest.values()))
        for record in moved_out:
            if record["infra"]["is_infra"]:
                store.append_quarantine(record)
    return changes
