"""Infrastructure failures: runs that say nothing about the agent and are quarantined, then rerun.

Shared rules come first, then the harness's own provider-failure signatures. Every verdict names
the rule that fired so a reader can check it against the session.
"""

from rig.schema import AgentRun, InfraVerdict, Metrics

ERROR_STOPS = {"error", "aborted"}


def classify(
    run: AgentRun, metrics: Metrics, signature: str | None, stall_s: float, tool_pending: bool = False
) -> InfraVerdict:
    """Decide whether a run failed for reasons outside the agent's control.

    Silence is infrastructure only while the harness waited for the model (`stalled_provider`);
    silence while a tool call the agent started was still running (`tool_pending`, from the
    adapter) is the agent's own hang, scored like any other failure (see hang_kind). A run the rig
    stopped at its run budget is the agent's: the model answered enough to spend it. A run the rig
    ended for its failed requests in a row (`failed_requests`) is infrastructure, under the
    harness's own signature when it has one.
    """
    if run.budget is not None:
        return InfraVerdict()
    if run.stalled and not tool_pending:
        return InfraVerdict(
            is_infra=True,
            rule="stalled_provider",
            detail=f"no output for {stall_s:g}s while waiting for the model; group killed",
        )
    if run.stalled:
        return InfraVerdict()
    if run.failed_requests:
        ended = f"the rig ended it after {run.failed_requests} model requests failed in a row"
        return InfraVerdict(
            is_infra=True,
            rule=signature or "failed_requests",
            detail="; ".join([ended, *metrics.error_messages[:2]]),
        )
    if signature:
        return InfraVerdict(
            is_infra=True, rule=signature, detail="; ".join(metrics.error_messages[:3]) or None
        )
    if metrics.assistant_messages == 0:
        return InfraVerdict(
            is_infra=True,
            rule="no_model_turn",
            detail="; ".join(metrics.error_messages[:3]) or f"exit {run.exit_code}, no assistant message",
        )
    if metrics.tool_calls == 0 and metrics.stop_reasons and set(metrics.stop_reasons) <= ERROR_STOPS:
        return InfraVerdict(
            is_infra=True, rule="only_error_responses", detail="; ".join(metrics.error_messages[:3]) or None
        )
    return InfraVerdict()


def hang_kind(run: AgentRun, tool_pending: bool) -> str | None:
    """`agent_hang` (silence while a tool call ran), `timeout` (the wall clock), else None."""
    if run.stalled and tool_pending:
        return "agent_hang"
    if run.timed_out:
        return "timeout"
    return None
