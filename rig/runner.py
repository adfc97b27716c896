"""Running experiments: one run is a function from a plan item to a record plus an artifact folder.

`run_one` performs the eight steps of DESIGN.md for one attempt. `execute` drives many of them
with N workers, quarantines infrastructure failures and reruns them interleaved, and stops after
K infrastructure failures in a row. Resuming skips every run id already recorded.
"""

import json
import os
import platform
import shutil
import sys
import tempfile
import threading
import traceback
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import version as dist_version
from pathlib import Path

import harnesses
from harnesses.base import Confinement, HarnessAdapter, kill_running_agents
from harnesses.registry import make_adapter
from rig import protect
from rig.audit import STOP_RULES, is_source, rig_paths_accessed, runner_probes, toolchain_digest
from rig.classify import classify, hang_kind
from rig.experiment import ExperimentError
from rig.migrate import design_digest, read_quarantine, read_runs
from rig.models import (
    AgentOutcome,
    AgentRun,
    AuditFinding,
    CheckOutcome,
    Condition,
    Experiment,
    HiddenOutcome,
    InfraVerdict,
    Metrics,
    Pins,
    PlanItem,
    Protected,
    RunRecord,
    SandboxStatus,
    Tampering,
    Task,
    WorkspaceStats,
)
from rig.proc import ContainmentError, containment, kill_running_commands, reap_orphans
from rig.redact import Redactor
from rig.sandbox import resolve
from rig.schedule import plan
from rig.scratch import COPY_PREFIX, Scratch, choose_scratch, on_disk
from rig.store import ResultsStore
from rig.untrusted import (
    COPY_THREADS,
    Bounds,
    LimitExceeded,
    NoRoom,
    TreeStats,
    copy_tree,
    remove,
    remove_trees,
)
from rig.verify import default_pycache, forget_bytecode, run_check, run_hidden
from rig.version import rig_version
from rig.workspace import (
    RIG_GIT_DIR,
    Stager,
    WorkspaceError,
    apply_overlays,
    apply_patch,
    changed_texts,
    check_runs_root,
    collect_diff,
    copy_fixture,
    init_baseline,
    quote_path,
    tree_digest,
)

DESIGN_FILE = "experiment.json"


@dataclass
class RunContext:
    """Everything a run needs besides its plan item; built once per experiment."""

    experiment: Experiment
    tasks: dict[str, Task]
    fixture: Path
    runs_root: Path
    store: ResultsStore
    redactor: Redactor
    pins: dict[str, Pins]
    confinement: Confinement
    sandbox: SandboxStatus
    secrets: list[Path]
    scratch: Scratch
    keep_workspaces: bool = False
    stopping: threading.Event = field(default_factory=threading.Event)
    """Set when the experiment is interrupted: runs in flight end at their next step."""

    @property
    def conditions(self) -> dict[str, Condition]:
        return {c.name: c for c in self.experiment.conditions}


def make_context(
    experiment: Experiment,
    tasks: list[Task],
    fixture: Path,
    results_root: Path,
    runs_root: Path,
    repo_root: Path,
    keep_workspaces: bool = False,
    sandbox: str = "auto",
) -> RunContext:
    """Check the runs root, pin every input, set up the sandbox, and bind the results folder.

    `sandbox` is auto (bubblewrap if this machine has it, else a warning in every record),
    require (refuse without it) or off. Raises SandboxError for require without bubblewrap.
    """
    # Agents run in their workspace: every path handed to them must be absolute.
    results_root, runs_root = results_root.resolve(), runs_root.resolve()
    for condition in experiment.conditions:
        for skill in condition.skills:
            if not (repo_root / skill / "SKILL.md").is_file():
                raise ExperimentError(
                    f"condition {condition.name!r}: skill {skill!r} has no SKILL.md under {repo_root}; "
                    "give a skill directory relative to the rig's repository"
                )
    check_runs_root(runs_root)
    scratch = choose_scratch(
        runs_root / experiment.name, results_root / experiment.name, experiment.workers, keep_workspaces
    )
    # Everything the agent must not read: the answers, the judge, the results and other runs.
    secrets = [
        fixture.resolve(),
        *(t.dir.resolve() for t in tasks),
        *(t.hidden_dir.resolve() for t in tasks),
        results_root / experiment.name,
        runs_root / experiment.name,
        scratch.folder,
    ]
    sandbox_plan, sandbox_status = resolve(
        sandbox,
        hidden=[
            repo_root.resolve(),
            results_root,
            runs_root,
            scratch.folder.parent,
            Path.home(),
            default_pycache(),
            *secrets,
        ],
        exposed=_agent_runtime(),
    )
    limits = experiment.limits
    confinement = Confinement(
        sandbox=sandbox_plan,
        processes=containment(sandboxed=sandbox_plan is not None),
        stream_head_bytes=limits.stream_head_bytes,
        stream_tail_bytes=limits.stream_tail_bytes,
        file_bytes=limits.file_bytes,
    )
    fixture_hash = tree_digest(fixture)
    versions = {
        "rig_version": rig_version(),
        "python_version": platform.python_version(),
        "ruff_version": dist_version("ruff"),
        "pytest_version": dist_version("pytest"),
        "toolchain_hash": toolchain_digest(),
    }
    pins = {}
    for task in tasks:
        harness_version = adapter_for(experiment, task).version()
        pins[task.id] = Pins(
            fixture_hash=fixture_hash,
            task_hash=tree_digest(task.dir),
            hidden_tests_hash=tree_digest(task.hidden_dir),
            harness_version=harness_version,
            **versions,
        )
    # Only once every pin could be read: a refused run leaves nothing behind.
    store = ResultsStore(results_root / experiment.name)
    _bind_design(store.root, experiment)
    redactor = Redactor.for_machine(
        runs_root=runs_root, repo_root=repo_root, results_root=results_root, verify_root=scratch.folder.parent
    )
    return RunContext(
        experiment,
        {t.id: t for t in tasks},
        fixture,
        runs_root,
        store,
        redactor,
        pins,
        confinement,
        sandbox_status,
        secrets,
        scratch,
        keep_workspaces,
    )


def _agent_runtime() -> list[Path]:
    """What an agent needs to see even inside hidden folders: interpreters, node, and the
    harnesses package (the pinned CLIs under harnesses/node, adapters' own agent scripts)."""
    node = shutil.which("node")
    paths = [Path(sys.prefix), Path(sys.base_prefix), Path(harnesses.__file__).resolve().parent]
    if node:
        paths.append(Path(node).resolve().parent.parent)
    return paths


def _bind_design(root: Path, experiment: Experiment) -> None:
    path = root / DESIGN_FILE
    design = {"digest": experiment.digest(), "experiment": experiment.model_dump(mode="json")}
    if path.exists():
        stored = json.loads(path.read_text())
        # Compared under this rig's digest rule: a rule that changed (workers left out, a new
        # field with its default) must not orphan the results of an unchanged design.
        if not isinstance(stored, dict) or design_digest(stored) != design["digest"]:
            raise ExperimentError(
                f"{root} holds results of a different design of {experiment.name!r}; "
                "give the changed experiment a new name, or move the old results away"
            )
        return
    root.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(design, indent=2, sort_keys=True) + "\n")


def adapter_for(experiment: Experiment, task: Task, confinement: Confinement | None = None) -> HarnessAdapter:
    """The experiment's harness, set up for one run of `task`."""
    return make_adapter(
        experiment.harness,
        task,
        experiment.timeouts.stall_s,
        experiment.provider,
        experiment.model,
        experiment.thinking,
        confinement,
    )


def _now() -> datetime:
    return datetime.now(UTC)


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


# The steps of one run (DESIGN.md), in order: a failure names the step it happened in.
STEPS = ("prepare", "agent", "collect", "protect", "check", "hidden", "record")
# A diagnostic switch: `RIG_INJECT_FAULT=<step>` raises inside that step of every run, to prove
# that any exception in a run becomes that run's record (tests/test_hostile.py).
INJECT_FAULT_VAR = "RIG_INJECT_FAULT"
TRACEBACK_FILE = "traceback.txt"
# How long an interrupted experiment waits for its runs in flight to end and remove their copies.
STOP_WAIT_S = 5.0


class InjectedFault(RuntimeError):
    """Raised where RIG_INJECT_FAULT names the current step."""


class Interrupted(RuntimeError):
    """Raised at the next step of a run once its experiment is interrupted."""


@dataclass
class Attempt:
    """One attempt of a plan item, filled in step by step; whatever was reached goes in its record."""

    item: PlanItem
    number: int
    folder: Path
    started: datetime
    step: str = "prepare"
    container: Path | None = None
    verify_root: Path | None = None
    baseline: str | None = None
    snap: protect.Snapshot | None = None
    agent_run: AgentRun | None = None
    metrics: Metrics = field(default_factory=Metrics)
    workspace: WorkspaceStats | None = None
    changed: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    texts: list[tuple[str, str, str]] | None = None
    audit: list[AuditFinding] = field(default_factory=list)
    tampering: Tampering = field(default_factory=Tampering)
    check: CheckOutcome | None = None
    hidden: HiddenOutcome | None = None
    verify_error: str | None = None
    warnings: list[str] = field(default_factory=list)
    stopping: threading.Event | None = None

    def enter(self, step: str) -> None:
        self.step = step
        if self.stopping is not None and self.stopping.is_set():
            raise Interrupted(f"experiment interrupted before step {step!r}")
        if os.environ.get(INJECT_FAULT_VAR) == step:
            raise InjectedFault(f"fault injected in step {step!r} ({INJECT_FAULT_VAR})")

    @property
    def workdir(self) -> Path:
        """The agent's workspace."""
        assert self.container is not None
        return self.container / "work"

    @property
    def verify_dir(self) -> Path:
        """The rig's copy of the workspace, made after the agent's processes were gone."""
        assert self.verify_root is not None
        return self.verify_root / "work"


def run_one(item: PlanItem, ctx: RunContext) -> tuple[dict, Path]:
    """Run one attempt of `item` through the steps; return its redacted record and folder.

    Any exception inside the attempt becomes its record (infra rule `rig_error`, the traceback in
    the attempt folder), so one run never takes down an experiment. Only a results folder the
    store cannot write raises.
    """
    number, folder = ctx.store.new_attempt_dir(item.run_id)
    attempt = Attempt(item, number, folder, _now(), stopping=ctx.stopping)
    task = ctx.tasks[item.task]
    try:
        adapter = adapter_for(ctx.experiment, task, ctx.confinement)
        _prepare(ctx, attempt)
        _agent(ctx, attempt, adapter)
        _collect(ctx, attempt, adapter)
        if attempt.workspace is not None and attempt.workspace.limit is None:
            _protect(attempt)
            _verify(ctx, attempt)
        attempt.enter("record")
        record = _record(ctx, attempt, adapter)
    except Exception as exc:  # any failure of the rig in this attempt is recorded, never raised
        record = _rig_error_record(ctx, attempt, exc)
    finally:
        left = _clean_up(ctx, attempt)
    if left:
        record = record.model_copy(update={"warnings": [*record.warnings, *left]})
    data = ctx.redactor.value(record.model_dump(mode="json"))
    _write_artifact(folder / "record.json", json.dumps(data, indent=2, sort_keys=True) + "\n")
    ctx.redactor.tree(folder)
    return data, folder


def _prepare(ctx: RunContext, attempt: Attempt) -> None:
    """1. A fresh workspace: the fixture, the task's setup, the condition's overlays, the baseline."""
    attempt.enter("prepare")
    item = attempt.item
    task, condition = ctx.tasks[item.task], ctx.conditions[item.condition]
    runs = ctx.runs_root / ctx.experiment.name
    runs.mkdir(parents=True, exist_ok=True)
    attempt.container = Path(tempfile.mkdtemp(prefix=f"{item.run_id}-a{attempt.number}-", dir=runs))
    copy_fixture(ctx.fixture, attempt.workdir)
    apply_patch(attempt.workdir, task.setup_patch)
    apply_overlays(attempt.workdir, condition.remove_files, condition.write_files)
    attempt.baseline = init_baseline(attempt.workdir, attempt.container / RIG_GIT_DIR)
    attempt.snap = protect.snapshot(attempt.workdir)


def _agent(ctx: RunContext, attempt: Attempt, adapter: HarnessAdapter) -> None:
    """2. The harness in the workspace; every process it started is gone when this returns."""
    attempt.enter("agent")
    task, condition = ctx.tasks[attempt.item.task], ctx.conditions[attempt.item.condition]
    timeout = ctx.experiment.timeouts.agent_s or task.spec.timeout_s
    attempt.agent_run = adapter.run(attempt.workdir, task.spec.prompt, condition, attempt.folder, timeout)


def _collect(ctx: RunContext, attempt: Attempt, adapter: HarnessAdapter) -> None:
    """3. The rig's own copy of the workspace (bounded), the diff, the session's metrics, the audit.

    The copy goes to a directory made only now, which the agent could not name: a process that
    escaped every kill writes to a workspace nobody reads any more.
    """
    attempt.enter("collect")
    assert attempt.agent_run is not None and attempt.baseline is not None
    attempt.metrics = adapter.parse_session(attempt.agent_run)
    try:
        stats, limit, staged = _copy_for_verification(ctx, attempt, ctx.scratch)
    except NoRoom as exc:
        if not ctx.scratch.in_memory:
            raise
        attempt.warnings.append(f"{exc}; made again on disk, beside the workspace")
        workspaces = on_disk(ctx.runs_root / ctx.experiment.name, "no room in memory")
        stats, limit, staged = _copy_for_verification(ctx, attempt, workspaces)
    attempt.workspace = WorkspaceStats(
        files=stats.files,
        dirs=stats.dirs,
        depth=stats.depth,
        excluded=stats.excluded,
        special=[quote_path(os.fsencode(p)) for p in stats.special],
        outward_links=[quote_path(os.fsencode(p)) for p in stats.outward_links],
        limit=limit,
    )
    if stats.special:
        attempt.warnings.append(
            f"workspace: {len(stats.special)} FIFOs, sockets, devices or unreadable entries left out "
            "of verification"
        )
    if stats.outward_links:
        attempt.warnings.append(
            f"workspace: {len(stats.outward_links)} symlinks leading out of the workspace left out of "
            "verification"
        )
    if limit is not None:
        return
    if staged:
        rig_git = attempt.container / RIG_GIT_DIR
        try:
            diff, attempt.changed = collect_diff(attempt.verify_dir, rig_git, attempt.baseline, staged=True)
            _write_artifact(attempt.folder / "diff.patch", diff)
            attempt.texts = changed_texts(attempt.verify_dir, rig_git, attempt.baseline, is_source)
        except WorkspaceError as exc:
            attempt.warnings.append(f"diff not collected: {exc}")
    attempt.audit = _audit(
        ctx, ctx.tasks[attempt.item.task], attempt.texts, attempt.metrics, attempt.container, attempt.folder
    )


def _copy_for_verification(
    ctx: RunContext, attempt: Attempt, place: Scratch
) -> tuple[TreeStats, str | None, bool]:
    """The rig's copy of the workspace in a directory made now under `place`, staged for the diff
    in the same pass: (what it held, the limit it passed if any, whether the index holds it).

    A copy that does not fit its room (NoRoom) is removed before this raises.
    """
    assert attempt.container is not None
    limits = ctx.experiment.limits
    place.folder.mkdir(parents=True, exist_ok=True)
    attempt.verify_root = Path(tempfile.mkdtemp(prefix=COPY_PREFIX, dir=place.folder))
    limit: str | None = None
    staged = False
    # One pass reads each file once: into the copy and into the rig's index of it.
    with Stager(attempt.verify_dir, attempt.container / RIG_GIT_DIR) as stager:
        try:
            stats = copy_tree(
                attempt.workdir,
                attempt.verify_dir,
                Bounds(limits.max_files, limits.max_depth),
                stager,
                threads=1 if place.in_memory else COPY_THREADS,
                room=place.room,
            )
        except LimitExceeded as exc:
            stats, limit = exc.stats, exc.what
        except NoRoom:
            remove_trees([attempt.verify_root])
            attempt.verify_root = None
            raise
        else:
            try:
                stager.finish()
                staged = True
            except WorkspaceError as exc:
                attempt.warnings.append(f"diff not collected: {exc}")
    attempt.paths = stager.paths
    return stats, limit, staged


def _protect(attempt: Attempt) -> None:
    """4. Protected files compared with their baseline and restored in the rig's copy."""
    attempt.enter("protect")
    assert attempt.snap is not None
    attempt.tampering = protect.compare(attempt.snap, attempt.verify_dir, attempt.paths)
    # copy_tree left every bytecode cache out of the rig's copy: no cache to look for.
    protect.restore(attempt.snap, attempt.verify_dir, attempt.tampering, caches=False)


def _verify(ctx: RunContext, attempt: Attempt) -> None:
    """5-6. The gate, then the hidden tests, in the rig's copy with a home made only now."""
    exp, task = ctx.experiment, ctx.tasks[attempt.item.task]
    assert attempt.verify_root is not None
    home = attempt.verify_root / "verify-home"
    home.mkdir()
    pycache = default_pycache()
    try:
        attempt.enter("check")
        attempt.check = run_check(attempt.verify_dir, home, exp.timeouts.check_s, pycache)
        _write_artifact(attempt.folder / "check.json", attempt.check.model_dump_json(indent=2))
        attempt.enter("hidden")
        attempt.hidden = run_hidden(
            attempt.verify_dir,
            task.hidden_dir,
            attempt.folder / "hidden-junit.xml",
            home,
            exp.timeouts.hidden_s,
            pycache,
        )
    except InjectedFault:
        raise
    except Exception as exc:  # a broken verification is recorded with its reason, never a dead runner
        attempt.verify_error = f"{type(exc).__name__}: {exc}"
    for outcome in (attempt.check, attempt.hidden):
        if outcome is not None and outcome.error:
            attempt.warnings.append(outcome.error)


def _record(ctx: RunContext, attempt: Attempt, adapter: HarnessAdapter) -> RunRecord:
    """7-8. The verdict (exit codes only), the infra classification and the record."""
    run = attempt.agent_run
    assert run is not None
    pending = adapter.tool_pending(run) if run.stalled else False
    signature = adapter.infra_signature(run, attempt.metrics)
    infra = classify(run, attempt.metrics, signature, ctx.experiment.timeouts.stall_s, pending)
    hang = hang_kind(run, pending)
    limit = attempt.workspace.limit if attempt.workspace else None
    verified = (
        limit is None
        and attempt.verify_error is None
        and attempt.check is not None
        and attempt.check.ok
        and attempt.hidden is not None
        and attempt.hidden.ok
    )
    success = verified and not attempt.audit and hang is None
    if success:
        failing_stage = None
    elif limit is not None:
        failing_stage = "workspace_limits"
    elif attempt.audit or hang is None:
        failing_stage = _failing_stage(attempt.check, attempt.hidden, attempt.verify_error, attempt.audit)
    else:
        failing_stage = hang
    warnings = [w for w in [ctx.sandbox.warning()] if w] + attempt.warnings
    if limit is not None:
        warnings.append(f"workspace limits: {limit}; not verified")
    return _base_record(ctx, attempt, adapter).model_copy(
        update={
            "exit_code": run.exit_code,
            "timed_out": run.timed_out,
            "stalled": run.stalled,
            "hang": hang,
            "success": success,
            "failing_stage": failing_stage,
            "check": attempt.check,
            "hidden": attempt.hidden,
            "verify_error": attempt.verify_error,
            "protected": Protected(**attempt.tampering.model_dump()),
            "audit": attempt.audit,
            "files_changed": attempt.changed,
            "agent": AgentOutcome(**run.model_dump(include=set(AgentOutcome.model_fields))),
            "metrics": attempt.metrics,
            "infra": infra,
            "warnings": warnings,
        }
    )


def _base_record(ctx: RunContext, attempt: Attempt, adapter: HarnessAdapter | None) -> RunRecord:
    """The fields every record has, whatever step the attempt reached."""
    exp, item = ctx.experiment, attempt.item
    task, condition = ctx.tasks[item.task], ctx.conditions[item.condition]
    finished = _now()
    return RunRecord(
        experiment=exp.name,
        run_id=item.run_id,
        attempt=attempt.number,
        task=task.id,
        hypothesis=task.spec.hypothesis,
        condition=condition.name,
        repetition=item.repetition,
        harness=exp.harness,
        harness_version=ctx.pins[task.id].harness_version,
        model=exp.model,
        thinking=condition.thinking or exp.thinking,
        condition_mapping=getattr(adapter, "condition_mapping", None),
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
        sandbox=ctx.sandbox,
        workspace=attempt.workspace,
        agent=AgentOutcome(command=[], exit_code=None, timed_out=False, stalled=False, wall_s=0.0),
        metrics=attempt.metrics,
        infra=InfraVerdict(),
        pins=ctx.pins[task.id].model_copy(update={"baseline_commit": attempt.baseline}),
        artifacts=attempt.folder.relative_to(ctx.store.root).as_posix(),
    )


def _rig_error_record(ctx: RunContext, attempt: Attempt, exc: Exception) -> RunRecord:
    """The record of an attempt the rig itself failed: infrastructure, quarantined and rerun."""
    detail = f"{type(exc).__name__} in step {attempt.step!r}: {' '.join(str(exc).split())}"
    try:
        _write_artifact(attempt.folder / TRACEBACK_FILE, "".join(traceback.format_exception(exc)))
    except OSError as write_error:
        detail += f" (traceback not saved: {write_error.strerror})"
    record = _base_record(ctx, attempt, None)
    run = attempt.agent_run
    update: dict = {
        "rig_error": detail,
        "infra": InfraVerdict(is_infra=True, rule="rig_error", detail=detail),
        "warnings": [w for w in [ctx.sandbox.warning()] if w] + attempt.warnings,
    }
    if run is not None:
        update |= {
            "exit_code": run.exit_code,
            "timed_out": run.timed_out,
            "stalled": run.stalled,
            "agent": AgentOutcome(**run.model_dump(include=set(AgentOutcome.model_fields))),
        }
    return record.model_copy(update=update)


def _clean_up(ctx: RunContext, attempt: Attempt) -> list[str]:
    """Remove the attempt's workspace and copy (however hostile), side by side; warnings for what
    stayed."""
    roots = [root for root in (attempt.container, attempt.verify_root) if root is not None]
    for root in roots:
        forget_bytecode(default_pycache(), root)
    if ctx.keep_workspaces:
        return []
    return [f"workspace not removed: {problem}" for problem in remove_trees(roots) if problem]


def _audit(
    ctx: RunContext,
    task: Task,
    texts: list[tuple[str, str, str]] | None,
    metrics: Metrics,
    container: Path,
    attempt_dir: Path,
) -> list[AuditFinding]:
    """The audit rules of rig.audit for one run, after its agent is gone.

    `texts` are the changed sources (rig.workspace.changed_texts), None if they could not be read.
    """
    pins = ctx.pins[task.id]
    findings = [
        AuditFinding(rule="rig_files_changed", detail=f"{name} {root} no longer matches its pinned hash")
        for name, root, pinned in (
            ("fixture", ctx.fixture, pins.fixture_hash),
            ("task", task.dir, pins.task_hash),
            ("hidden tests", task.hidden_dir, pins.hidden_tests_hash),
        )
        if tree_digest(root) != pinned
    ]
    if toolchain_digest() != pins.toolchain_hash:
        findings.append(
            AuditFinding(
                rule="toolchain_changed",
                detail=f"the verifying interpreter {sys.prefix} changed (startup hooks, pytest or ruff)",
            )
        )
    if texts is None:
        findings.append(
            AuditFinding(rule="changes_unreadable", detail="the workspace's changes could not be collected")
        )
    else:
        findings += runner_probes(texts)
    findings += rig_paths_accessed(metrics, ctx.secrets, own=[container, attempt_dir])
    return findings


def _write_artifact(path: Path, text: str) -> None:
    """Write one of the rig's own files in an attempt folder the agent could write into.

    Whatever the agent left at that name (a forged file, a symlink to elsewhere) is replaced, never
    followed.
    """
    remove(path)
    path.write_text(text)


@dataclass
class Progress:
    """Counts the runner reports after every finished attempt."""

    total: int
    done: int = 0
    successes: int = 0
    infra: int = 0
    reruns_queued: int = 0
    exhausted: list[str] = field(default_factory=list)
    stopped: str | None = None


def pending_items(ctx: RunContext, items: list[PlanItem]) -> tuple[list[PlanItem], dict[str, int]]:
    """Plan items without a scored record and with attempts left; also quarantine counts per run."""
    ctx.store.repair()
    done = {r["run_id"] for r in read_runs(ctx.store)}
    quarantined = Counter(r["run_id"] for r in read_quarantine(ctx.store))
    pending = [
        i for i in items if i.run_id not in done and quarantined[i.run_id] < ctx.experiment.max_attempts
    ]
    return pending, dict(quarantined)


def execute(
    ctx: RunContext,
    items: list[PlanItem],
    on_update: Callable[[Progress, dict | None], None] | None = None,
) -> Progress:
    """Run every pending item with the experiment's workers; quarantine and rerun infra failures."""
    with ctx.store.writer():
        # Helpers of agents whose runner was killed (kill -9) would still be writing somewhere.
        reap_orphans()
        _remove_copies(ctx)
        pending, quarantined = pending_items(ctx, items)
        progress = Progress(total=len(pending))
        queue = deque(pending)
        attempts = Counter(quarantined)
        running: dict[Future, PlanItem] = {}
        pool = ThreadPoolExecutor(max_workers=ctx.experiment.workers)
        try:
            _drive(ctx, pool, queue, running, attempts, progress, on_update)
        except BaseException:
            # Ctrl-C, SIGTERM or a store that cannot write: nothing of a run in flight is appended
            # (its attempt folder stays, a resume reruns it). Every agent and verification process
            # is killed; runs in flight end at their next step, removing their copies, but a worker
            # may be stuck inside a run, so they are waited for only briefly.
            ctx.stopping.set()
            pool.shutdown(wait=False, cancel_futures=True)
            kill_running_commands()
            try:
                kill_running_agents()
            except ContainmentError as exc:
                # The interruption stays the reason the command ends; the survivors are named.
                print(f"warning: {exc}", file=sys.stderr)
            wait(running, timeout=STOP_WAIT_S)
            _remove_copies(ctx)
            raise
        pool.shutdown(wait=True)
        ctx.scratch.close()
    return progress


def _remove_copies(ctx: RunContext) -> None:
    for problem in ctx.scratch.remove_copies():
        print(f"warning: verification copy not removed: {problem}", file=sys.stderr)
    ctx.scratch.close()


def _drive(
    ctx: RunContext,
    pool: ThreadPoolExecutor,
    queue: deque[PlanItem],
    running: dict[Future, PlanItem],
    attempts: Counter,
    progress: Progress,
    on_update: Callable[[Progress, dict | None], None] | None,
) -> None:
    """Submit, collect and record runs until the queue is empty or the experiment stops."""
    exp = ctx.experiment
    consecutive_infra = 0
    while queue or running:
        while queue and len(running) < exp.workers and progress.stopped is None:
            item = queue.popleft()
            running[pool.submit(run_one, item, ctx)] = item
        if not running:
            break
        finished, _ = wait(running, return_when=FIRST_COMPLETED)
        for future in finished:
            item = running.pop(future)
            try:
                record, _folder = future.result()
            except Exception as exc:  # the attempt folder itself could not be written
                record = _unrecorded(ctx, item, exc)
            if record["infra"]["is_infra"]:
                ctx.store.append_quarantine(record)
                attempts[item.run_id] += 1
                progress.infra += 1
                consecutive_infra += 1
                if attempts[item.run_id] < exp.max_attempts:
                    queue.append(item)  # behind every other pending run: interleaved, not back to back
                    progress.reruns_queued += 1
                else:
                    progress.exhausted.append(item.run_id)
                    progress.done += 1
            else:
                ctx.store.append_run(record)
                consecutive_infra = 0
                progress.done += 1
                progress.successes += bool(record["success"])
            broken = sorted({f["rule"] for f in record.get("audit", [])} & STOP_RULES)
            if broken and progress.stopped is None:
                progress.stopped = (
                    f"stopped: run {item.run_id} changed the rig's own files ({', '.join(broken)}); "
                    "restore them (git checkout, reinstall the venv) before rerunning"
                )
            if consecutive_infra >= exp.max_consecutive_infra and progress.stopped is None:
                infra = record["infra"]
                if infra["rule"] == "rig_error":
                    cause = f"last: {infra['detail']}; its traceback.txt has the details"
                    fix = "fix that"
                else:
                    cause, fix = f"last: {infra['rule']}", "fix the provider"
                progress.stopped = (
                    f"stopped after {consecutive_infra} infrastructure failures in a row ({cause}); "
                    f"{fix}, then rerun to resume"
                )
            if on_update:
                on_update(progress, record)


def _unrecorded(ctx: RunContext, item: PlanItem, exc: Exception) -> dict:
    """The infrastructure record of an attempt whose folder could not be made (a full disk)."""
    attempt = Attempt(item, 0, ctx.store.root / "runs" / item.run_id, _now(), step="attempt folder")
    return ctx.redactor.value(_rig_error_record(ctx, attempt, exc).model_dump(mode="json"))


def experiment_plan(ctx: RunContext) -> list[PlanItem]:
    return plan(ctx.experiment, list(ctx.tasks))
