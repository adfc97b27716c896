"""`rig import atif`: ATIF trajectories (Agent Trajectory Interchange Format) as runs.

Each trajectory is validated with the `atif` package's models and is one run. Its usage is its
`final_metrics` (prompt tokens include the cached ones, which rig counts apart; `extra` adds what
`rig export` writes there: cache writes, reasoning, totals, tool calls and errors), else the sum of
its agent steps' metrics where every agent step has them; its tool calls are counted in its steps
where `final_metrics` does not say. ATIF itself records no outcome, so the outcome is read, in this
order, from:

1. `extra.rig`, the verdict `rig export` writes: the task, repetition and attempt, success, and
   whether the attempt was quarantined (infrastructure) with its rule; a folder `rig export` wrote
   holds every condition's trajectories, and NAME picks those of condition NAME;
2. the Harbor trial around it (`<trial>/agent/trajectory.json` beside `<trial>/result.json`): the
   task, the reward, an exception (infrastructure), as `rig import harbor` reads them;
3. the trajectory's own `extra.task` with `extra.reward` (a number in [0, 1]) or `extra.success`.

A trajectory with none of them is refused. A FILE_OR_DIR folder contributes every .json below it
whose `schema_version` starts with "ATIF-" (Harbor's other JSON files are passed over).
"""

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rig.ingest import harbor
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
from rig.schema import ForeignMetrics, ForeignPins

SCHEMA_PREFIX = "ATIF-"


def _document(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise IngestError(f"{path}: not JSON ({first_line(exc)}); give an ATIF trajectory") from None


def _is_trajectory(document: Any) -> bool:
    version = document.get("schema_version") if isinstance(document, dict) else None
    return isinstance(version, str) and version.startswith(SCHEMA_PREFIX)


def trajectory_files(path: Path) -> list[tuple[Path, dict[str, Any]]]:
    """The trajectory at `path`, or every one in the folder `path`, validated with `atif`."""
    import atif

    if path.is_dir():
        found = [(p, d) for p in sorted(path.rglob("*.json")) if _is_trajectory(d := _document(p))]
        if not found:
            raise IngestError(f"{path} holds no ATIF trajectory (no .json with an ATIF schema_version)")
    else:
        document = _document(path)
        if not _is_trajectory(document):
            raise IngestError(f"{path} is not an ATIF trajectory (no ATIF schema_version); give one")
        found = [(path, document)]
    for file, document in found:
        try:
            parsed = atif.Trajectory.model_validate(document)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"]) or "the document"
            raise IngestError(
                f"{file}: not a valid ATIF trajectory ({where}: {error['msg']}); fix it or leave it out"
            ) from None
        if parsed.continued_trajectory_ref:
            raise IngestError(
                f"{file} continues in {parsed.continued_trajectory_ref}: a run's trajectory must be one "
                "file; join the segments first"
            )
    return found


def _metrics(document: dict[str, Any]) -> ForeignMetrics:
    """The trajectory's usage in rig's terms; None where it reports none."""
    final = document.get("final_metrics") or {}
    extra = final.get("extra") or {}
    steps = [s for s in document.get("steps") or [] if isinstance(s, dict)]
    agent = [s for s in steps if s.get("source") == "agent"]
    if final:
        prompt, completion = (
            integer(final.get("total_prompt_tokens")),
            integer(final.get("total_completion_tokens")),
        )
        cached, cost = integer(final.get("total_cached_tokens")), number(final.get("total_cost_usd"))
    elif agent and all(isinstance(s.get("metrics"), dict) for s in agent):
        # No totals: the agent steps' own metrics, when every one has them.
        prompt, completion, cached = (
            sum_known(integer(s["metrics"].get(key)) for s in agent)
            for key in ("prompt_tokens", "completion_tokens", "cached_tokens")
        )
        costs = [number(s["metrics"].get("cost_usd")) for s in agent]
        cost = sum_known(costs) if None not in costs else None
    else:
        prompt = completion = cached = None
        cost = None
    cache_write = integer(extra.get("cache_write_tokens"))
    # ATIF's prompt tokens include the cached ones (reads, and writes where the source says).
    tokens_in = prompt - (cached or 0) - (cache_write or 0) if prompt is not None else None
    total_tokens = integer(extra.get("total_tokens"))
    if total_tokens is None and prompt is not None and completion is not None:
        total_tokens = prompt + completion
    calls = integer(extra.get("tool_calls"))
    responses = integer(extra.get("assistant_messages"))
    return ForeignMetrics(
        model=(document.get("agent") or {}).get("model_name"),
        input_tokens=tokens_in,
        output_tokens=completion,
        cache_read_tokens=cached,
        cache_write_tokens=cache_write,
        reasoning_tokens=integer(extra.get("reasoning_tokens")),
        total_tokens=total_tokens,
        cost_usd=cost,
        cost_source=(extra.get("cost_source") or "atif") if cost is not None else None,
        assistant_messages=responses if responses is not None else len(agent),
        tool_calls=calls if calls is not None else sum(len(s.get("tool_calls") or []) for s in agent),
        tool_errors=integer(extra.get("tool_errors")),
    )


def _from_rig(run: Run, verdict: dict[str, Any]) -> None:
    """The outcome, cell, times and pins `rig export` wrote in `extra.rig`."""
    run.task = str(verdict.get("task"))
    run.repetition = integer(verdict.get("repetition"))
    run.attempt = integer(verdict.get("attempt")) or 1
    infra = verdict.get("infra") or {}
    if verdict.get("status") == "quarantined":
        run.outcome = None
        run.infra = (str(infra.get("rule") or "quarantined"), first_line(infra.get("detail") or ""))
    else:
        run.outcome = 1.0 if verdict.get("success") else 0.0
    run.started_at, run.finished_at = (
        timestamp(verdict.get("started_at")),
        timestamp(verdict.get("finished_at")),
    )
    run.wall_s = number(verdict.get("wall_s"))
    pins = {k: v for k, v in (verdict.get("pins") or {}).items() if k in ForeignPins.model_fields}
    run.pins = ForeignPins.model_validate(pins)


def _from_harbor(run: Run, result: dict[str, Any], path: Path) -> None:
    """The outcome, task, agent and times of the Harbor trial the trajectory belongs to."""
    run.task = str(result.get("task_name"))
    run.outcome, run.infra = harbor.outcome(result, None, path)
    name, version, model = harbor.agent_model(result)
    run.harness, run.harness_version, run.model = name, version, model
    run.group = f"{name}/{model}"
    run.started_at, run.finished_at = (
        timestamp(result.get("started_at")),
        timestamp(result.get("finished_at")),
    )
    run.wall_s = seconds_between(run.started_at, run.finished_at)
    run.pins = ForeignPins(task_hash=result.get("task_checksum"), harness_version=version)
    run.order = (result.get("started_at") or "", str(result.get("trial_name")))


def _from_extra(run: Run, extra: dict[str, Any], path: Path) -> None:
    """The outcome the trajectory's own `extra` states: task, and reward or success."""
    reward, success = extra.get("reward"), extra.get("success")
    value = float(success) if isinstance(success, bool) else number(reward)
    if not isinstance(extra.get("task"), str) or value is None:
        raise IngestError(
            f"{path} states no outcome: ATIF has no outcome field, and rig reads one from extra.rig "
            "(rig export), a Harbor trial's result.json beside agent/, or extra.task with extra.reward "
            "or extra.success; give trajectories that have one"
        )
    if not 0 <= value <= 1:
        raise IngestError(f"{path}: extra.reward {reward!r} is outside [0, 1]; give an outcome in [0, 1]")
    run.task, run.outcome = extra["task"], value
    run.repetition = integer(extra.get("repetition"))


def _run(item: Input, path: Path, document: dict[str, Any]) -> Run:
    agent = document.get("agent") or {}
    extra = document.get("extra") or {}
    run = Run(
        condition=item.name,
        task="",
        file=shown_path(path),
        item=str(document.get("trajectory_id") or document.get("session_id") or path.name),
        outcome=None,
        harness=agent.get("name"),
        harness_version=agent.get("version"),
        model=agent.get("model_name"),
        metrics=_metrics(document),
        tool_version=str(document.get("schema_version")),
        order=(path.as_posix(),),
    )
    trial_result = path.parent.parent / harbor.RESULT
    if isinstance(extra.get("rig"), dict):
        _from_rig(run, extra["rig"])
    elif path.parent.name == "agent" and trial_result.is_file():
        _from_harbor(run, harbor.load_result(trial_result), trial_result)
    else:
        _from_extra(run, extra, path)
    return run


def _pick(item: Input, runs: list[tuple[Run, str | None]]) -> list[Run]:
    """The runs of condition NAME: a `rig export` folder holds every condition's trajectories."""
    named = {c for _, c in runs if c is not None}
    if len(named) <= 1:
        return [run for run, _ in runs]
    picked = [run for run, condition in runs if condition == item.name]
    if not picked:
        raise IngestError(
            f"{item.path} holds trajectories of conditions {', '.join(sorted(named))}: name each input after "
            f"the condition it is (e.g. {' '.join(f'{c}={item.path}' for c in sorted(named))})"
        )
    return picked


def read_trajectories(inputs: list[Input]) -> Source:
    """The runs of the ATIF trajectories given per condition; IngestError for a file that is not a
    valid trajectory or states no outcome."""
    runs: list[Run] = []
    for item in inputs:
        read = []
        for path, document in trajectory_files(item.path):
            verdict = (document.get("extra") or {}).get("rig")
            condition = verdict.get("condition") if isinstance(verdict, dict) else None
            read.append((_run(item, path, document), condition))
        runs += sorted(_pick(item, read), key=lambda run: run.order)
    harbor.ungroup(runs)
    return Source(
        kind="atif",
        runs=runs,
        conditions=[i.name for i in inputs],
        inputs={i.name: i.shown for i in inputs},
    )
