"""Running experiments: one run is a function from a plan item to a record plus an artifact folder.

`run_one` performs the eight steps of DESIGN.md for one attempt. `execute` drives many of them
with N workers, quarantines infrastructure failures and reruns them interleaved, and stops after
K infrastructure failures in a row. Resuming skips every run id already recorded.
"""

import json
import platform
import shutil
import sys
import tempfile
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import version as dist_version
from pathlib import Path

from harnesses.base import Condition, Confinement, HarnessAdapter, Metrics, kill_running_agents
from harnesses.cli import NODE_BIN
from harnesses.registry import make_adapter
from harnesses.scripted import AGENT_SCRIPT
from rig import __version__, protect
from rig.audit import (
    STOP_RULES,
    AuditFinding,
    is_source,
    rig_paths_accessed,
    runner_probes,
    toolchain_digest,
)
from rig.classify import classify
from rig.experiment import Experiment, ExperimentError
from rig.proc import reap_orphans
from rig.records import AgentOutcome, Pins, Protected, RunRecord
from rig.redact import Redactor
from rig.sandbox import SandboxStatus, resolve
from rig.schedule import PlanItem, plan
from rig.store import ResultsStore
from rig.tasks import Task
from rig.verify import (
    CheckOutcome,
    HiddenOutcome,
    default_pycache,
    forget_bytecode,
    run_check,
    run_hidden,
)
from rig.workspace import (
    RIG_GIT_DIR,
    WorkspaceError,
    apply_overlays,
    apply_patch,
    changed_texts,
    check_runs_root,
    collect_diff,
    copy_fixture,
    init_baseline,
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
    keep_workspaces: bool = False

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
    # Everything the agent must not read: the answers, the judge, the results and other runs.
    secrets = [
        fixture.resolve(),
        *(t.dir.resolve() for t in tasks),
        *(t.hidden_dir.resolve() for t in tasks),
        results_root / experiment.name,
        runs_root / experiment.name,
    ]
    sandbox_plan, sandbox_status = resolve(
        sandbox,
        hidden=[repo_root.resolve(), results_root, runs_root, Path.home(), default_pycache(), *secrets],
        exposed=_agent_runtime(),
    )
    limits = experiment.limits
    confinement = Confinement(
        sandbox=sandbox_plan,
        stream_head_bytes=limits.stream_head_bytes,
        stream_tail_bytes=limits.stream_tail_bytes,
        file_bytes=limits.file_bytes,
    )
    (runs_root / experiment.name).mkdir(parents=True, exist_ok=True)
    store = ResultsStore(results_root / experiment.name)
    _bind_design(store.root, experiment)
    fixture_hash = tree_digest(fixture)
    versions = {
        "rig_version": __version__,
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
    redactor = Redactor.for_machine(runs_root=runs_root, repo_root=repo_root, results_root=results_root)
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
        keep_workspaces,
    )


def _agent_runtime() -> list[Path]:
    """What an agent needs to see even inside hidden folders: interpreters, pinned CLIs, node."""
    node = shutil.which("node")
    paths = [Path(sys.prefix), Path(sys.base_prefix), NODE_BIN.parent, AGENT_SCRIPT]
    if node:
        paths.append(Path(node).resolve().parent.parent)
    return paths


def _bind_design(root: Path, experiment: Experiment) -> None:
    path = root / DESIGN_FILE
    design = {"digest": experiment.digest(), "experiment": experiment.model_dump(mode="json")}
    if path.exists():
        stored = json.loads(path.read_text())
        if stored.get("digest") != design["digest"]:
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


def run_one(item: PlanItem, ctx: RunContext) -> tuple[dict, Path]:
    """Run one attempt of `item` through the eight steps; return its redacted record and folder."""
    exp = ctx.experiment
    task, condition = ctx.tasks[item.task], ctx.conditions[item.condition]
    attempt, attempt_dir = ctx.store.new_attempt_dir(item.run_id)
    adapter = adapter_for(exp, task, ctx.confinement)
    started = _now()
    container = Path(tempfile.mkdtemp(prefix=f"{item.run_id}-a{attempt}-", dir=ctx.runs_root / exp.name))
    workdir, home = container / "work", container / "verify-home"
    warnings: list[str] = [w for w in [ctx.sandbox.warning()] if w]
    try:
        # 1. Prepare
        copy_fixture(ctx.fixture, workdir)
        apply_patch(workdir, task.setup_patch)
        apply_overlays(workdir, condition.remove_files, condition.write_files)
        baseline = init_baseline(workdir, container / RIG_GIT_DIR)
        snap = protect.snapshot(workdir)
        # 2. Agent
        timeout = exp.timeouts.agent_s or task.spec.timeout_s
        agent_run = adapter.run(workdir, task.spec.prompt, condition, attempt_dir, timeout)
        # 3. Collect
        changed: list[str] = []
        texts: list[tuple[str, str, str]] | None = None
        try:
            diff, changed = collect_diff(workdir, container / RIG_GIT_DIR, baseline)
            _write_artifact(attempt_dir / "diff.patch", diff)
            texts = changed_texts(workdir, container / RIG_GIT_DIR, baseline, is_source)
        except WorkspaceError as exc:
            warnings.append(f"diff not collected: {exc}")
        metrics = adapter.parse_session(agent_run)
        audit = _audit(ctx, task, texts, metrics, container, attempt_dir)
        # 4. Protect
        tampering = protect.compare(snap, workdir)
        protect.restore(snap, workdir, tampering)
        # 5-6. Check, hidden tests
        check = hidden = None
        verify_error = None
        pycache = default_pycache()
        # Created only now: nothing the agent could have planted there runs during verification.
        home.mkdir()
        try:
            check = run_check(workdir, home, exp.timeouts.check_s, pycache)
            _write_artifact(attempt_dir / "check.json", check.model_dump_json(indent=2))
            hidden = run_hidden(
                workdir,
                task.hidden_dir,
                attempt_dir / "hidden-junit.xml",
                home,
                exp.timeouts.hidden_s,
                pycache,
            )
        except Exception as exc:  # a broken verification is recorded with its reason, never a dead runner
            verify_error = f"{type(exc).__name__}: {exc}"
        for outcome in (check, hidden):
            if outcome is not None and outcome.error:
                warnings.append(outcome.error)
        # 7. Decide
        verified = (
            verify_error is None and check is not None and check.ok and hidden is not None and hidden.ok
        )
        success = verified and not audit
        # 8. Record
        infra = classify(
            agent_run, metrics, adapter.infra_signature(agent_run, metrics), exp.timeouts.stall_s
        )
        finished = _now()
        record = RunRecord(
            experiment=exp.name,
            run_id=item.run_id,
            attempt=attempt,
            task=task.id,
            hypothesis=task.spec.hypothesis,
            condition=condition.name,
            repetition=item.repetition,
            harness=exp.harness,
            harness_version=ctx.pins[task.id].harness_version,
            model=exp.model,
            thinking=condition.thinking or exp.thinking,
            condition_mapping=getattr(adapter, "condition_mapping", None),
            started_at=started,
            finished_at=finished,
            wall_s=round((finished - started).total_seconds(), 3),
            exit_code=agent_run.exit_code,
            timed_out=agent_run.timed_out,
            stalled=agent_run.stalled,
            success=success,
            failing_stage=None if success else _failing_stage(check, hidden, verify_error, audit),
            check=check,
            hidden=hidden,
            verify_error=verify_error,
            protected=Protected(**tampering.model_dump()),
            audit=audit,
            sandbox=ctx.sandbox,
            files_changed=changed,
            agent=AgentOutcome(**agent_run.model_dump(include=set(AgentOutcome.model_fields))),
            metrics=metrics,
            infra=infra,
            pins=ctx.pins[task.id].model_copy(update={"baseline_commit": baseline}),
            artifacts=attempt_dir.relative_to(ctx.store.root).as_posix(),
            warnings=warnings,
        )
    finally:
        forget_bytecode(default_pycache(), container)
        if not ctx.keep_workspaces:
            shutil.rmtree(container, ignore_errors=True)
    data = ctx.redactor.value(record.model_dump(mode="json"))
    _write_artifact(attempt_dir / "record.json", json.dumps(data, indent=2, sort_keys=True) + "\n")
    ctx.redactor.tree(attempt_dir)
    return data, attempt_dir


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
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)
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
    done = {r["run_id"] for r in ctx.store.read_runs()}
    quarantined = Counter(r["run_id"] for r in ctx.store.read_quarantine())
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
    exp = ctx.experiment
    # Helpers of agents whose runner was killed (kill -9) would still be writing somewhere.
    reap_orphans()
    pending, quarantined = pending_items(ctx, items)
    progress = Progress(total=len(pending))
    queue = deque(pending)
    attempts = Counter(quarantined)
    running: dict[Future, PlanItem] = {}
    with ThreadPoolExecutor(max_workers=exp.workers) as pool:
        try:
            _drive(ctx, pool, queue, running, attempts, progress, on_update)
        except KeyboardInterrupt:
            # Nothing of an interrupted run is appended: its attempt folder stays, and a resume reruns it.
            pool.shutdown(wait=False, cancel_futures=True)
            kill_running_agents()
            raise
    return progress


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
            record, _folder = future.result()
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
                progress.stopped = (
                    f"stopped after {consecutive_infra} infrastructure failures in a row "
                    f"(last: {record['infra']['rule']}); fix the provider, then rerun to resume"
                )
            if on_update:
                on_update(progress, record)


def experiment_plan(ctx: RunContext) -> list[PlanItem]:
    return plan(ctx.experiment, list(ctx.tasks))
