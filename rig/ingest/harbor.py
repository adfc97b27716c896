"""`rig import harbor`: Harbor job folders as runs, one condition per job folder.

A job folder holds one folder per trial, each with the trial's `result.json` (Harbor's TrialResult):
the task's name, the agent (name, version) and its model, the verifier's rewards, the agent's token
usage and cost (n_input_tokens counts the cached ones, which rig counts apart), the times, and
`exception_info` when the trial raised. A trial is a run: its reward (`--reward`, default `reward`
or the only one) the outcome, its rank by start time within its task the repetition. A trial that
raised (at the trial or at any of its steps) or has no reward is infrastructure. Where a condition's
job ran more than one agent or model, each run's `group` is its agent/model configuration.

With Harbor installed, each result.json is read with its TrialResult model (which also reads older
result formats); without it (rig's Python, 3.11, is older than Harbor's), as its documented JSON.
The job's lock.json, where there is one (Harbor 0.2 on), names the Harbor version that ran it.
"""

import json
from pathlib import Path
from typing import Any

from rig.ingest.common import (
    IngestError,
    Input,
    Run,
    Source,
    first_line,
    integer,
    number,
    seconds_between,
    shown_path,
    sum_known,
    timestamp,
)
from rig.schema import ForeignMetrics, ForeignPins, ModelUsage

RESULT = "result.json"
DEFAULT_REWARD = "reward"


def load_result(path: Path) -> dict[str, Any]:
    """A trial's result.json as JSON: through Harbor's TrialResult where Harbor is installed."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise IngestError(f"{path}: cannot read it ({exc}); give a readable Harbor job folder") from None
    try:
        from harbor.models.trial.result import TrialResult
    except ImportError:
        TrialResult = None  # noqa: N806
    try:
        if TrialResult is not None:
            return TrialResult.model_validate_json(text).model_dump(mode="json")
        data = json.loads(text)
    except ValueError as exc:
        raise IngestError(
            f"{path} is not a Harbor trial result ({first_line(exc)}); give a Harbor job folder"
        ) from None
    if not isinstance(data, dict) or not all(k in data for k in ("task_name", "trial_name", "agent_info")):
        raise IngestError(f"{path} is not a Harbor trial result (no task_name); give a Harbor job folder")
    return data


def trial_results(job: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Every trial result of the job folder `job`, by trial folder name."""
    if not job.is_dir():
        raise IngestError(f"{job} is not a folder; give a Harbor job folder (it holds one folder per trial)")
    paths = sorted(p / RESULT for p in job.iterdir() if p.is_dir() and (p / RESULT).is_file())
    if not paths:
        raise IngestError(f"{job} holds no Harbor trial (no */{RESULT}); give a Harbor job folder")
    return [(path, load_result(path)) for path in paths]


def harbor_version(job: Path) -> str | None:
    """The Harbor version that ran the job, as its lock.json says; None without one."""
    try:
        lock = json.loads((job / "lock.json").read_text(encoding="utf-8"))
        found = lock["harbor"]["version"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return found if isinstance(found, str) else None


def _contexts(result: dict[str, Any]) -> list[dict[str, Any]]:
    # A multi-step trial records its agent's usage per step, a single-step one on the trial.
    if isinstance(result.get("agent_result"), dict):
        return [result["agent_result"]]
    steps = result.get("step_results") or []
    return [
        s["agent_result"] for s in steps if isinstance(s, dict) and isinstance(s.get("agent_result"), dict)
    ]


def _usage(tokens_in: int | None, cached: int | None, tokens_out: int | None) -> dict[str, int | None]:
    """Harbor's counts in rig's terms: its input tokens include the cached ones, rig's do not."""
    return {
        "input_tokens": tokens_in - (cached or 0) if tokens_in is not None else None,
        "cache_read_tokens": cached,
        "output_tokens": tokens_out,
        "total_tokens": tokens_in + tokens_out if tokens_in is not None and tokens_out is not None else None,
    }


def metrics(result: dict[str, Any], model: str | None) -> ForeignMetrics:
    """The agent's usage and cost in a trial result; None where it reports none."""
    contexts = _contexts(result)
    costs = [number(c.get("cost_usd")) for c in contexts]
    per_model: dict[str, ModelUsage] = {}
    for context in contexts:
        for name, usage in (context.get("model_usage") or {}).items():
            if not isinstance(usage, dict):
                continue
            counts = _usage(
                integer(usage.get("n_input_tokens")),
                integer(usage.get("n_cache_tokens")),
                integer(usage.get("n_output_tokens")),
            )
            previous = per_model.get(str(name), ModelUsage())
            cost = number(usage.get("cost_usd"))
            per_model[str(name)] = ModelUsage(
                input_tokens=previous.input_tokens + (counts["input_tokens"] or 0),
                output_tokens=previous.output_tokens + (counts["output_tokens"] or 0),
                cache_read_tokens=previous.cache_read_tokens + (counts["cache_read_tokens"] or 0),
                total_tokens=previous.total_tokens + (counts["total_tokens"] or 0),
                cost_usd=(previous.cost_usd or 0.0) + cost if cost is not None else previous.cost_usd,
            )
    cost = sum_known(costs)
    return ForeignMetrics(
        model=model,
        **_usage(
            sum_known(integer(c.get("n_input_tokens")) for c in contexts),
            sum_known(integer(c.get("n_cache_tokens")) for c in contexts),
            sum_known(integer(c.get("n_output_tokens")) for c in contexts),
        ),
        cost_usd=cost,
        cost_source="harbor" if cost is not None else None,
        per_model=per_model,
    )


def _exception(result: dict[str, Any]) -> dict[str, Any] | None:
    steps = [s for s in result.get("step_results") or [] if isinstance(s, dict)]
    for info in [result.get("exception_info"), *(s.get("exception_info") for s in steps)]:
        if isinstance(info, dict):
            return info
    return None


def outcome(
    result: dict[str, Any], reward: str | None, path: Path
) -> tuple[float | None, tuple[str, str] | None]:
    """A trial's outcome in [0, 1], or why it is infrastructure: it raised, or has no reward."""
    exception = _exception(result)
    if exception is not None:
        detail = f"{exception.get('exception_type')}: {first_line(exception.get('exception_message'))}"
        return None, ("harbor_exception", detail)
    rewards = (result.get("verifier_result") or {}).get("rewards") or {}
    if not rewards:
        return None, ("unscored", "no verifier reward")
    key = reward or (
        DEFAULT_REWARD if DEFAULT_REWARD in rewards or len(rewards) != 1 else next(iter(rewards))
    )
    if key not in rewards:
        raise IngestError(f"{path}: no reward {key!r}; use --reward with one of {', '.join(rewards)}")
    value = rewards[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise IngestError(
            f"{path}: reward {key!r} is {value!r}, not an outcome in [0, 1]; choose another with --reward"
        )
    return float(value), None


def agent_model(result: dict[str, Any]) -> tuple[str | None, str | None, str | None]:
    """The trial's agent name and version, and its model as provider/name where a provider is named."""
    agent = result.get("agent_info") or {}
    info = agent.get("model_info") or {}
    model = info.get("name")
    if model and info.get("provider"):
        model = f"{info['provider']}/{model}"
    return agent.get("name"), agent.get("version"), model


def read_jobs(inputs: list[Input], reward: str | None = None) -> Source:
    """The runs of one Harbor job folder per condition; IngestError for a folder that holds no
    trial, a result that is not a trial's, or a reward that is not an outcome."""
    runs: list[Run] = []
    for item in inputs:
        tool = harbor_version(item.path)
        job: list[Run] = []
        for path, result in trial_results(item.path):
            name, agent_version, model = agent_model(result)
            value, infra = outcome(result, reward, path)
            started, finished = timestamp(result.get("started_at")), timestamp(result.get("finished_at"))
            job.append(
                Run(
                    condition=item.name,
                    task=str(result["task_name"]),
                    file=shown_path(path),
                    item=str(result["trial_name"]),
                    outcome=value,
                    infra=infra,
                    group=f"{name}/{model}",
                    harness=name,
                    harness_version=agent_version,
                    model=model,
                    started_at=started,
                    finished_at=finished,
                    wall_s=seconds_between(started, finished),
                    metrics=metrics(result, model),
                    pins=ForeignPins(task_hash=result.get("task_checksum"), harness_version=agent_version),
                    tool_version=f"harbor {tool}" if tool else None,
                    order=(result.get("started_at") or "", str(result["trial_name"])),
                )
            )
        # In the order the trials ran: the tasks are first seen as the job met them.
        runs += sorted(job, key=lambda run: run.order)
    ungroup(runs)
    return Source(
        kind="harbor",
        runs=runs,
        conditions=[i.name for i in inputs],
        inputs={i.name: i.shown for i in inputs},
    )


def ungroup(runs: list[Run]) -> None:
    """Keep a run's agent/model `group` only where a condition has more than one: a job of one
    configuration is the condition itself, and needs no further stratum."""
    configurations: dict[str, set[str | None]] = {}
    for run in runs:
        configurations.setdefault(run.condition, set()).add(run.group)
    if all(len(groups) <= 1 for groups in configurations.values()):
        for run in runs:
            run.group = None
