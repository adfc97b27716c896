"""What a Dask worker runs: plan items of an experiment, in the worker's own run context.

A worker builds its run context once per job (WorkerJob: the design and what the coordinator
pinned) from its own checkout of the rig, its own harness CLIs and its own sandbox, and refuses
the job when any pin differs. It runs the attempt its coordinator numbered into a private results
folder, and hands back the redacted record and the attempt folder as a compressed bundle: only
the coordinator writes the results, so no file system is shared. A real provider's key comes from
the worker's own environment, as the adapter reads it there.
"""

import hashlib
import io
import json
import shutil
import socket
import stat
import tarfile
import tempfile
import threading
from pathlib import Path

from rig import paths
from rig.confine.agent import kill_running_agents
from rig.confine.proc import kill_running_commands, reap_orphans
from rig.confine.untrusted import remove_tree, walk
from rig.packs.manifest import load_pack
from rig.packs.tasks import load_tasks
from rig.run.runner import RunContext, make_context, run_one
from rig.run.steps.attempt import write_artifact
from rig.schema import PlanItem, WorkerJob
from rig.workspace.build import default_runs_root

RECORD_FILE = "record.json"
_contexts: dict[str, RunContext] = {}
_lock = threading.Lock()


class PinMismatch(Exception):
    """This worker would not run what the coordinator pinned; the message names the difference."""


def worker_id() -> str:
    """This worker as a stable hash of its host and Dask name: records name it without its address."""
    from distributed import get_worker

    name = get_worker().name
    return hashlib.sha256(f"{socket.gethostname()}\0{name}".encode()).hexdigest()[:12]


def pin_difference(job: WorkerJob, ctx: RunContext) -> str | None:
    """Where this worker's context differs from the coordinator's: each differing pin (of the first
    task it differs for) and the sandbox; None if nowhere."""
    problems: list[str] = []
    for task, wanted in sorted(job.pins.items()):
        mine = ctx.pins.get(task)
        if mine is None:
            problems.append(f"task {task} is not in this worker's pack")
        else:
            problems += [
                f"{name} of {task} is {getattr(mine, name)} here, {value} on the coordinator"
                for name, value in wanted.model_dump().items()
                if getattr(mine, name) != value
            ]
        if problems:
            break
    if ctx.sandbox != job.sandbox:
        problems.append(f"sandbox is {ctx.sandbox.detail!r} here, {job.sandbox.detail!r} on the coordinator")
    return "; ".join(problems) or None


def context_for(job: WorkerJob) -> RunContext:
    """This worker's run context of `job`, made on first use; PinMismatch if it differs."""
    key = job.digest()
    with _lock:
        ctx = _contexts.get(key)
        if ctx is not None:
            return ctx
        # Helpers of agents of a worker that was killed (kill -9) would still be writing somewhere.
        reap_orphans()
        tasks = load_tasks(load_pack(job.experiment.pack), job.tasks)
        results = Path(tempfile.mkdtemp(prefix="rig-worker-results-"))
        ctx = make_context(
            job.experiment, tasks, results, default_runs_root(), paths.REPO_ROOT, sandbox=job.sandbox_mode
        )
        problem = pin_difference(job, ctx)
        if problem is not None:
            ctx.scratch.close()
            shutil.rmtree(results, ignore_errors=True)
            raise PinMismatch(problem)
        _contexts[key] = ctx
        return ctx


def check(job: WorkerJob) -> str | None:
    """Run on every worker before it gets work: None if it can run `job`, else why not."""
    try:
        context_for(job)
    except PinMismatch as exc:
        return str(exc)
    except Exception as exc:  # any reason this worker cannot run the job refuses it, with the reason
        return f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    return None


def bundle(folder: Path) -> bytes:
    """The attempt folder as a tar.gz of its directories and regular files (links, FIFOs and devices
    an agent left in it stay behind), walked without recursion."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:gz") as tar:
        for rel, st in walk(folder, skip=(), dirs=True):
            if stat.S_ISDIR(st.st_mode):
                info = tarfile.TarInfo(rel)
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            elif stat.S_ISREG(st.st_mode):
                info = tarfile.TarInfo(rel)
                info.size, info.mode = st.st_size, stat.S_IMODE(st.st_mode) & 0o755
                with (folder / rel).open("rb") as handle:
                    tar.addfile(info, handle)
    return data.getvalue()


def unbundle(data: bytes, folder: Path) -> None:
    """Extract a worker's bundle into the coordinator's attempt folder (tarfile's data filter:
    nothing outside it, no link, no device)."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(folder, filter="data")


def run(job: WorkerJob, item: PlanItem, number: int) -> tuple[dict, bytes]:
    """Run attempt `number` of `item` here; the record (naming this worker) and the bundled folder."""
    ctx = context_for(job)
    record, folder = run_one(item, ctx, number)
    record = {**record, "worker": worker_id()}
    write_artifact(folder / RECORD_FILE, json.dumps(record, indent=2, sort_keys=True) + "\n")
    try:
        return record, bundle(folder)
    finally:
        remove_tree(folder.parent)


def stop() -> None:
    """The coordinator was interrupted: runs in flight end at their next step, agents are killed,
    and the next job builds a fresh context."""
    with _lock:
        for ctx in _contexts.values():
            ctx.stopping.set()
        _contexts.clear()
    # The worker serves the next job: its runs in flight stop at their next step (`stopping`).
    kill_running_commands(for_good=False)
    kill_running_agents()
