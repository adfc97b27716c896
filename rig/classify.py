"""Infrastructure failures: runs that say nothing about the agent and are quarantined, then rerun.

Shared rules come first, then the harness's own provider-failure signatures. Every verdict names
the rule that fired so a reader can check it against the session.
"""

from harnesses.base import AgentRun, Metrics
from rig.records import InfraVerdict

ERROR_STOPS = {"error", "aborted"}


def classify(run: AgentRun, metrics: Metrics, signature: str | None, stall_s: float) -> InfraVerdict:
    """Decide whether a run failed for reasons outside the agent's control."""
    if run.stalled:
        return InfraVerdict(is_infra=True, rule="stalled", detail=f"no output for {stall_s:g}s; group killed")
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
