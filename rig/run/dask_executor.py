"""Running an experiment's attempts on Dask distributed: a local cluster, or any scheduler.

The coordinator (this process) keeps the plan, the interleaving, the quarantine and the results:
it numbers each attempt, makes its folder, and submits one Dask task per attempt, at most as many
as the workers have agent slots (the `agents` resource), so the queue and its reruns stay here.
A worker (rig.run.remote) runs the attempt and returns the record with the attempt folder as a
bundle, which the coordinator unpacks and records; only it writes `runs.jsonl`.

Every attempt is accounted for by the rig: the scheduler's own retries are turned off, so a worker
that dies or disconnects while running an attempt fails that attempt, which is recorded as an
infrastructure failure with rule `worker_lost` and rerun like any other. Before it gets work,
every worker checks its pins against the coordinator's (rig.run.remote.check): a worker that differs
is named with the difference and retired from the cluster. A worker that joins later checks them
before its first attempt, and is retired the same way (that attempt is an infrastructure failure,
rule `worker_refused`).
"""

import json
import uuid
from collections.abc import Callable
from concurrent.futures import CancelledError, Future

from rig.run import remote
from rig.run.runner import RunContext, attempt_of
from rig.run.steps.attempt import Trail, write_artifact
from rig.run.steps.record import lost_record, rig_error_record
from rig.schema import PlanItem, WorkerJob

AGENTS = "agents"
CONNECT_TIMEOUT_S = 10


class ExecutorError(Exception):
    """The cluster cannot run the experiment; the message names the cause and the fix."""


def _no_retries(dask_scheduler) -> None:
    # A task whose worker dies is otherwise silently rerun elsewhere (allowed-failures): the rig
    # must record every attempt, so the first death fails it and the rig reruns it itself.
    dask_scheduler.allowed_failures = 0


class DaskExecutor:
    """Attempts as Dask tasks on the workers of `client` that accept the job."""

    def __init__(
        self, ctx: RunContext, client, job: WorkerJob, slots: int, say: Callable[[str], None], cluster=None
    ) -> None:
        self.ctx, self.client, self.job, self.cluster, self.say = ctx, client, job, cluster, say
        self.slots = slots
        self.futures: set = set()
        """The Dask futures in flight; a finished one is released, so its bundle is not kept."""

    @classmethod
    def start(
        cls,
        ctx: RunContext,
        sandbox_mode: str,
        scheduler: str | None,
        workers: int,
        agents_per_worker: int,
        say: Callable[[str], None],
    ) -> "DaskExecutor":
        """Connect to `scheduler` (None: start a LocalCluster of `workers` processes with
        `agents_per_worker` agent slots each), turn its retries off and admit the workers whose pins
        match; ExecutorError if none does."""
        import distributed

        cluster = None
        try:
            if scheduler is None:
                cluster = distributed.LocalCluster(
                    n_workers=workers,
                    threads_per_worker=agents_per_worker,
                    processes=True,
                    resources={AGENTS: agents_per_worker},
                    host="127.0.0.1",
                    dashboard_address="127.0.0.1:0",
                )
                client = distributed.Client(cluster, timeout=CONNECT_TIMEOUT_S)
            else:
                client = distributed.Client(scheduler, timeout=CONNECT_TIMEOUT_S)
        except OSError as exc:
            raise ExecutorError(
                f"cannot reach the Dask scheduler {scheduler} ({exc}); "
                "start it (`dask scheduler`) or fix --scheduler"
            ) from None
        try:
            if "dashboard" in client.scheduler_info().get("services", {}):
                say(f"dask: dashboard {client.dashboard_link}")
            client.run_on_scheduler(_no_retries)
            job = WorkerJob(
                experiment=ctx.experiment,
                tasks=sorted(ctx.tasks),
                pins=ctx.pins,
                sandbox=ctx.sandbox,
                sandbox_mode=sandbox_mode,
            )
            slots = _admit(client, job, say)
        except BaseException:
            client.close()
            if cluster is not None:
                cluster.close()
            raise
        return cls(ctx, client, job, slots, say, cluster)

    def submit(self, item: PlanItem) -> Future:
        number, folder = self.ctx.store.new_attempt_dir(item.run_id)
        done: Future = Future()
        task = self.client.submit(
            remote.run,
            self.job,
            item,
            number,
            key=f"rig-{item.run_id}-{number}-{uuid.uuid4().hex[:8]}",
            pure=False,
            resources={AGENTS: 1},
        )
        self.futures.add(task)

        def finish(task) -> None:
            try:
                done.set_result(self._recorded(item, number, folder, task))
            except BaseException as exc:  # the future must end, whatever went wrong here
                done.set_exception(exc)
            finally:
                self.futures.discard(task)
                task.release()

        task.add_done_callback(finish)
        return done

    def _recorded(self, item: PlanItem, number: int, folder, task) -> tuple[dict, object]:
        """The record of a finished Dask task: the worker's, with its folder unpacked here, or that
        of a lost attempt."""
        from distributed.comm.core import CommClosedError
        from distributed.scheduler import KilledWorker

        attempt = attempt_of(self.ctx, item, number, folder)
        try:
            record, data = task.result()
        except (KilledWorker, CommClosedError, CancelledError) as exc:
            lost = lost_record(
                attempt, rule="worker_lost", detail=f"{type(exc).__name__}: {' '.join(str(exc).split())}"
            )
            record = self.ctx.redactor.value(lost.model_dump(mode="json"))
        except remote.PinMismatch as exc:
            worker = self._retire_failed(task)
            self.say(f"dask: worker {worker} refused: {exc}")
            refused = lost_record(attempt, rule="worker_refused", detail=f"worker {worker} refused: {exc}")
            record = self.ctx.redactor.value(refused.model_dump(mode="json"))
        except Exception as exc:  # the worker's rig failed outside the attempt: its traceback is kept
            failed = rig_error_record(attempt, trail=Trail(step="worker"), run=None, exc=exc)
            record = self.ctx.redactor.value(failed.model_dump(mode="json"))
        else:
            # The worker wrote the record (naming itself) into the folder it bundled.
            remote.unbundle(data, folder)
            return record, folder
        write_artifact(folder / remote.RECORD_FILE, json.dumps(record, indent=2, sort_keys=True) + "\n")
        return record, folder

    def _retire_failed(self, task) -> str:
        """Retire the worker where `task` failed; its address (or "?" if gone already)."""
        worker = self.client.run_on_scheduler(_worker_of, key=task.key)
        if worker:
            self.client.retire_workers([worker], close_workers=True)
        return worker or "?"

    def interrupt(self) -> None:
        self.client.cancel(list(self.futures), force=True)
        try:
            self.client.run(remote.stop, on_error="ignore")
        finally:
            self.close()

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


def _worker_of(dask_scheduler, key: str) -> str | None:
    task = dask_scheduler.tasks.get(key)
    return next(iter(task.erred_on)) if task is not None and task.erred_on else None


def _admit(client, job: WorkerJob, say: Callable[[str], None]) -> int:
    """Check every worker against `job`: retire (and name) those that cannot run it; the agent
    slots of the others. ExecutorError if none is left."""
    info = client.scheduler_info()["workers"]
    if not info:
        raise ExecutorError(
            f"the Dask cluster has no worker; start some (`dask worker SCHEDULER --resources {AGENTS}=N`)"
        )
    problems = {
        address: f"{type(answer).__name__}: {answer}" if isinstance(answer, BaseException) else answer
        for address, answer in client.run(remote.check, job, on_error="return").items()
    }
    slots, refused = 0, []
    for address, problem in sorted(problems.items()):
        agents = int(info.get(address, {}).get("resources", {}).get(AGENTS, 0))
        if problem is None and agents < 1:
            problem = f"it declares no {AGENTS} resource; start it with --resources {AGENTS}=N"
        if problem is None:
            slots += agents
        else:
            refused.append(address)
            say(f"dask: worker {address} refused: {problem}")
    if refused:
        client.retire_workers(refused, close_workers=True)
    if not slots:
        first = next(p for p in problems.values() if p) if any(problems.values()) else "no agent slots"
        raise ExecutorError(
            f"no Dask worker can run this experiment ({len(refused)} refused; first: {first}); "
            "run the same rig, packs and CLIs on each (`make setup`), then rerun"
        )
    say(f"dask: {len(problems) - len(refused)} workers, {slots} agent slots")
    return slots
