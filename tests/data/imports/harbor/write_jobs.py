"""Write the Harbor job folders the import tests read, with Harbor's own result models.

Harbor needs Python >= 3.12 and rig runs on 3.11, so the folders are written once, in a throwaway
virtualenv per Harbor version, and committed under tests/data/imports/harbor/<version>/. To rewrite
them (uv is in rig's .venv/bin):

    uv venv -p 3.12 /tmp/harbor-new && uv pip install -p /tmp/harbor-new/bin/python harbor==0.26.0
    /tmp/harbor-new/bin/python tests/data/imports/harbor/write_jobs.py tests/data/imports/harbor/0.26.0
    uv venv -p 3.12 /tmp/harbor-old && uv pip install -p /tmp/harbor-old/bin/python harbor==0.1.25
    /tmp/harbor-old/bin/python tests/data/imports/harbor/write_jobs.py tests/data/imports/harbor/0.1.25

Each version gets two jobs, `job-sonnet` and `job-haiku` (one agent, two models), of three tasks x
two attempts: a job's config.json and result.json (and, from Harbor 0.2 on, lock.json naming the Harbor
version that ran it), and per trial `<trial>/result.json` (the trial's
TrialResult, as Harbor's Trial writes it) and `<trial>/agent/trajectory.json` (its ATIF trajectory,
in the version of Harbor's trajectory models). The rewards are REWARDS (binary with 0.26.0,
fractional with 0.1.25, FRACTIONAL); the haiku job's second fix-bug attempt raised an exception
instead of being verified. Every time and id is fixed, so rerunning writes the same files.
"""

import hashlib
import sys
import uuid
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from pathlib import Path

from harbor.models.agent.context import AgentContext
from harbor.models.job.config import JobConfig
from harbor.models.job.result import JobResult, JobStats
from harbor.models.task.id import LocalTaskId
from harbor.models.trajectories import Agent, FinalMetrics, Metrics, Step, Trajectory
from harbor.models.trial.config import AgentConfig, TaskConfig, TrialConfig
from harbor.models.trial.result import AgentInfo, ExceptionInfo, ModelInfo, TimingInfo, TrialResult
from harbor.models.verifier.result import VerifierResult

AGENT, AGENT_VERSION = "claude-code", "2.0.14"
JOBS = {"job-sonnet": "claude-sonnet-4-5", "job-haiku": "claude-haiku-4-5"}
TASKS = ("hello-world", "fix-bug", "write-tests")
# Per job and task, each attempt's reward; None: the attempt raised (no reward).
REWARDS = {
    "job-sonnet": {"hello-world": (1, 1), "fix-bug": (0, 1), "write-tests": (0, 0)},
    "job-haiku": {"hello-world": (1, 1), "fix-bug": (0, None), "write-tests": (1, 0)},
}
# The older version's write-tests rewards are partial credit.
FRACTIONAL = {"job-sonnet": (0.25, 0), "job-haiku": (0.5, 0)}
# Per trial: input tokens (cache included, as Harbor counts them), cache tokens, output tokens, cost.
USAGE = {"job-sonnet": (1000, 400, 200, 0.01), "job-haiku": (600, 100, 150, 0.004)}
WALL_S = {"job-sonnet": 90, "job-haiku": 60}
START = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
NEW = tuple(int(p) for p in version("harbor").split(".")[:2]) >= (0, 2)


def _uuid(*parts: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, "/".join(parts))


def _trajectory(job: str, trial: str, model: str) -> Trajectory:
    tokens_in, cached, tokens_out, cost = USAGE[job]
    return Trajectory(
        session_id=str(_uuid(job, trial, "session")),
        agent=Agent(name=AGENT, version=AGENT_VERSION, model_name=model),
        steps=[
            Step(step_id=1, source="user", message="Do the task."),
            Step(
                step_id=2,
                source="agent",
                message="Done.",
                model_name=model,
                metrics=Metrics(prompt_tokens=tokens_in, completion_tokens=tokens_out, cached_tokens=cached),
            ),
        ],
        final_metrics=FinalMetrics(
            total_prompt_tokens=tokens_in,
            total_completion_tokens=tokens_out,
            total_cached_tokens=cached,
            total_cost_usd=cost,
            total_steps=2,
        ),
    )


def write_job(out: Path, job: str, model: str, index: int) -> None:
    job_dir = out / job
    job_dir.mkdir(parents=True, exist_ok=True)
    job_id = _uuid(job)
    agent = AgentConfig(name=AGENT, model_name=f"anthropic/{model}")
    tasks = [TaskConfig(path=Path("tasks") / task) for task in TASKS]
    config = JobConfig(job_name=job, jobs_dir=out, n_attempts=2, agents=[agent], tasks=tasks)
    (job_dir / "config.json").write_text(config.model_dump_json(indent=4))
    tokens_in, cached, tokens_out, cost = USAGE[job]
    results = []
    for t, task in enumerate(TASKS):
        for attempt, reward in enumerate(REWARDS[job][task]):
            if not NEW and task == "write-tests":
                reward = FRACTIONAL[job][attempt]
            trial = f"{task}__{hashlib.sha256(f'{job}/{task}/{attempt}'.encode()).hexdigest()[:7]}"
            started = START + timedelta(hours=index, minutes=10 * t + attempt)
            finished = started + timedelta(seconds=WALL_S[job])
            trial_dir = job_dir / trial
            (trial_dir / "agent").mkdir(parents=True, exist_ok=True)
            exception = None
            if reward is None:
                exception = ExceptionInfo(
                    exception_type="EnvironmentStartTimeoutError",
                    exception_message="Environment did not start within 600 seconds",
                    exception_traceback="Traceback (most recent call last):\n  ...\n",
                    occurred_at=finished,
                )
            context = {
                "n_input_tokens": tokens_in,
                "n_cache_tokens": cached,
                "n_output_tokens": tokens_out,
                "cost_usd": cost,
            }
            if NEW:
                context["model_usage"] = {
                    f"anthropic/{model}": {
                        "n_input_tokens": tokens_in,
                        "n_cache_tokens": cached,
                        "n_output_tokens": tokens_out,
                        "cost_usd": cost,
                    }
                }
            result = TrialResult(
                id=_uuid(job, trial),
                task_name=task,
                trial_name=trial,
                trial_uri=f"file:///jobs/{job}/{trial}",
                task_id=LocalTaskId(path=Path("tasks") / task),
                source="adhoc",
                task_checksum=hashlib.sha256(f"task {task}".encode()).hexdigest()[:16],
                config=TrialConfig(
                    task=TaskConfig(path=Path("tasks") / task),
                    trial_name=trial,
                    trials_dir=job_dir,
                    agent=agent,
                    job_id=job_id,
                ),
                agent_info=AgentInfo(
                    name=AGENT, version=AGENT_VERSION, model_info=ModelInfo(name=model, provider="anthropic")
                ),
                agent_result=AgentContext(**context),
                verifier_result=VerifierResult(rewards={"reward": reward}) if reward is not None else None,
                exception_info=exception,
                started_at=started,
                finished_at=finished,
                agent_execution=TimingInfo(started_at=started, finished_at=finished),
            )
            (trial_dir / "result.json").write_text(result.model_dump_json(indent=4))
            trajectory = _trajectory(job, trial, f"anthropic/{model}")
            text = trajectory.model_dump_json(indent=2, exclude_none=True)
            (trial_dir / "agent" / "trajectory.json").write_text(text)
            results.append(result)
    job_result = JobResult(
        id=job_id,
        started_at=START + timedelta(hours=index),
        finished_at=START + timedelta(hours=index, minutes=30),
        n_total_trials=len(results),
        stats=JobStats.from_trial_results(results),
        trial_results=results,
    )
    (job_dir / "result.json").write_text(job_result.model_dump_json(indent=4, exclude={"trial_results"}))
    if NEW:
        from harbor.models.job.config import RetryConfig
        from harbor.models.job.lock import HarborLockInfo, JobLock

        lock = JobLock(
            created_at=START + timedelta(hours=index),
            harbor=HarborLockInfo(version=version("harbor")),
            n_concurrent_trials=1,
            retry=RetryConfig(),
        )
        (job_dir / "lock.json").write_text(lock.model_dump_json(indent=4))


if __name__ == "__main__":
    target = Path(sys.argv[1])
    for index, (job, model) in enumerate(JOBS.items()):
        write_job(target, job, model, index)
    print(f"harbor {version('harbor')}: wrote {', '.join(JOBS)} in {target}", file=sys.stderr)
