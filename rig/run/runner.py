"""Running experiments: one run is a function from a plan item to a record plus an artifact folder.

`run_one` chains the eight steps of docs/design.md (rig/run/steps/) for one attempt. `execute`
drives many of them with N workers, quarantines infrastructure failures and reruns them
interleaved, and stops after K infrastructure failures in a row, or once an experiment's
`[stopping]` rule has decided (rig.analysis.sequential), or before a run that could take it past
its budget (rig.experiment.budget), or once a run found a disk full (infra rule `disk_full`).
Resuming skips every run id already recorded, and starts nothing once the rule decided.
"""

import json
import platform
import shutil
import sys
import threading
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as dist_version
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import harnesses.registry
from harnesses.registry import adapter_for, harness_cache, install_version
from rig.confine.agent import Confinement, kill_running_agents
from rig.confine.network import RELAY, resolve_network, unreachable_model
from rig.confine.proc import ContainmentError, containment, kill_running_commands, reap_orphans
from rig.confine.project_env import ProjectEnv
from rig.confine.sandbox import resolve
from rig.confine.untrusted import remove_trees
from rig.env.activate import activate_each
from rig.env.build import cache_root as env_cache_root
from rig.experiment.budget import BudgetMonitor
from rig.experiment.load import ExperimentError
from rig.experiment.plan import plan
from rig.packs.manifest import MANIFEST, pack_digest
from rig.paths import local
from rig.run.leftovers import clean_up
from rig.run.steps.agent import agent
from rig.run.steps.attempt import Attempt, Trail, write_artifact
from rig.run.steps.collect import collect
from rig.run.steps.prepare import prepare
from rig.run.steps.protect import protect
from rig.run.steps.record import record, rig_error_record
from rig.run.steps.verify import Verified, verify
from rig.schema import (
    BASES_DIR,
    RIG_SIDE_RULES,
    AgentRun,
    Condition,
    Experiment,
    NetworkOutcome,
    Pack,
    Pins,
    PlanItem,
    SandboxStatus,
    Tampering,
    Task,
)
from rig.store import runs_cache
from rig.store.migrate import design_digest
from rig.store.redact import Redactor
from rig.store.results import ResultsStore
from rig.verify.audit import STOP_RULES, toolchain_digest
from rig.verify.checks import default_pycache, forget_bytecode
from rig.verify.classify import DISK_FULL
from rig.version import rig_version
from rig.workspace.bases import bases_root
from rig.workspace.build import check_agent_root, tree_digest
from rig.workspace.scratch import Scratch, choose_scratch

if TYPE_CHECKING:
    from rig.analysis.sequential import SequentialResult

DESIGN_FILE = "experiment.json"


@dataclass
class RunContext:
    """Everything a run needs besides its plan item; built once per experiment."""

    experiment: Experiment
    pack: Pack
    tasks: dict[str, Task]
    runs_root: Path
    store: ResultsStore
    redactor: Redactor
    pins: dict[str, Pins]
    """Per task, the pins of a run at the pinned harness version."""
    confinement: Confinement
    sandbox: SandboxStatus
    secrets: list[Path]
    scratch: Scratch
    keep_workspaces: bool = False
    harness_versions: dict[str, str] = field(default_factory=dict)
    """Condition name -> the `--version` of the CLI it runs, for conditions with a harness_version."""
    stopping: threading.Event = field(default_factory=threading.Event)
    """Set when the experiment is interrupted: runs in flight end at their next step."""
    network: NetworkOutcome | None = None
    """The network policy as this machine enforces it, before any run (network.resolve_network)."""
    project_envs: dict[str, ProjectEnv | None] = field(default_factory=dict)
    """Task id -> its project environment (its base's, else the pack's), built before any run
    (rig.env.activate); tasks whose trees need the same environment share one."""

    @property
    def conditions(self) -> dict[str, Condition]:
        return {c.name: c for c in self.experiment.conditions}

    def confinement_for(self, task: str) -> Confinement:
        """What confines the agents of `task`: the experiment's confinement in its environment,
        which its sandbox shows, and no other task's (one built from a later tree can hold a
        published release of the project with the task's fix)."""
        env = self.project_envs.get(task)
        sandbox = self.confinement.sandbox
        if sandbox is not None and env is not None:
            sandbox = replace(sandbox, exposed=(*sandbox.exposed, *env.visible()))
        return replace(self.confinement, project_env=env, sandbox=sandbox)


def make_context(
    experiment: Experiment,
    tasks: list[Task],
    results_root: Path,
    runs_root: Path,
    repo_root: Path,
    keep_workspaces: bool = False,
    sandbox: str = "auto",
    notify: Callable[[str], None] | None = None,
    adds_runs: bool = True,
) -> RunContext:
    """Check the runs root, install the harness versions conditions ask for, pin every input, set up
    the sandbox, and bind the results folder. `tasks` are of one pack (rig.packs.tasks.load_tasks).

    `sandbox` is auto (bubblewrap if this machine has it, else a warning in every record),
    require (refuse without it) or off. The experiment's network policy is enforced by the same
    means (rig.confine.network): NetworkError for require where no network namespace can be made, and
    ExperimentError for a real provider without a known endpoint under a policy that confines. Raises
    SandboxError for require without bubblewrap;
    HarnessUnavailable or CliNotFound for a harness_version that cannot be installed. `notify` is
    told when an install or the environment's build starts (it takes a while). `adds_runs`: the
    context will add runs to the results folder, which must then hold none of another project
    environment.
    """
    # Agents run in their workspace: every path handed to them must be absolute.
    results_root, runs_root = results_root.resolve(), runs_root.resolve()
    pack = tasks[0].pack.plain
    _check_skills(experiment)
    problem = unreachable_model(experiment.network, experiment.provider)
    if problem:
        raise ExperimentError(problem)
    check_agent_root(runs_root)
    by_tree = activate_each([t.pack for t in tasks], notify)
    project_envs = {t.id: by_tree[t.pack.fixture_dir] for t in tasks}
    # Installed before anything else is made, so a version npm cannot install leaves nothing behind.
    for condition in experiment.conditions:
        if condition.harness_version:
            install_version(experiment.harness, condition.harness_version, notify)
    scratch = choose_scratch(
        runs_root / experiment.name, results_root / experiment.name, experiment.workers, keep_workspaces
    )
    # Everything the agent must not read: the answers, the judge, the results and other runs.
    secrets = [
        pack.root / MANIFEST,
        pack.fixture_dir.resolve(),
        # Bases hold the tests other tasks hide, the pack's bundle and this machine's copies alike.
        (pack.root / BASES_DIR).resolve(),
        bases_root().resolve(),
        *(t.dir.resolve() for t in tasks),
        *(t.hidden_dir.resolve() for t in tasks),
        results_root / experiment.name,
        runs_root / experiment.name,
        scratch.folder,
    ]
    hidden = [
        repo_root.resolve(),
        results_root,
        runs_root,
        scratch.folder.parent,
        Path.home(),
        default_pycache(),
        # Other packs' environments, and other tasks': each run is shown its own (confinement_for).
        env_cache_root().resolve(),
        *secrets,
    ]
    # Each task's own environment is shown by confinement_for.
    exposed = agent_readable([])
    confinement, sandbox_status, network_status = _confine(
        experiment, sandbox, hidden=hidden, exposed=exposed
    )
    pins = _pins(experiment, pack, tasks, project_envs)
    harness_versions = {
        c.name: adapter_for(experiment, tasks[0], harness_version=c.harness_version).version()
        for c in experiment.conditions
        if c.harness_version
    }
    # Only once every pin could be read: a refused run leaves nothing behind.
    store = ResultsStore(results_root / experiment.name)
    _bind_design(store.root, experiment)
    if adds_runs:
        _check_environment(store, pack, project_envs)
    redactor = Redactor.for_machine(
        runs_root=runs_root, repo_root=repo_root, results_root=results_root, verify_root=scratch.folder.parent
    )
    return RunContext(
        experiment=experiment,
        pack=pack,
        tasks={t.id: t for t in tasks},
        runs_root=runs_root,
        store=store,
        redactor=redactor,
        pins=pins,
        confinement=confinement,
        sandbox=sandbox_status,
        secrets=secrets,
        scratch=scratch,
        keep_workspaces=keep_workspaces,
        harness_versions=harness_versions,
        network=network_status,
        project_envs=project_envs,
    )


def _confine(
    experiment: Experiment,
    sandbox: str,
    *,
    hidden: list[Path],
    exposed: list[Path],
) -> tuple[Confinement, SandboxStatus, NetworkOutcome]:
    """What confines every agent of the experiment (the `sandbox` mode, hiding `hidden` but for
    `exposed`; its network policy; its limits and run budget), with the sandbox and network as this
    machine enforces them."""
    sandbox_plan, sandbox_status = resolve(sandbox, hidden=hidden, exposed=exposed)
    network_plan, network_status = resolve_network(
        experiment.network, experiment.allow, sandbox_plan is not None, required=sandbox == "require"
    )
    limits = experiment.limits
    confinement = Confinement(
        sandbox=sandbox_plan,
        network=network_plan,
        processes=containment(sandboxed=sandbox_plan is not None),
        stream_head_bytes=limits.stream_head_bytes,
        stream_tail_bytes=limits.stream_tail_bytes,
        file_bytes=limits.file_bytes,
        run_budget=experiment.run_budget,
        after_final_s=experiment.timeouts.after_final_s,
    )
    return confinement, sandbox_status, network_status


def _check_skills(experiment: Experiment) -> None:
    """Raise ExperimentError for a condition's skill that is no skill directory."""
    for condition in experiment.conditions:
        for skill in condition.skills:
            if not (local(skill) / "SKILL.md").is_file():
                raise ExperimentError(
                    f"condition {condition.name!r}: skill {skill!r} has no SKILL.md ({local(skill)}); "
                    "give a skill directory relative to the experiment file, or an absolute path"
                )


def _pins(
    experiment: Experiment, pack: Pack, tasks: list[Task], project_envs: dict[str, ProjectEnv | None]
) -> dict[str, Pins]:
    """Per task, what its runs pin: the pack, the tree it starts from (the fixture or its base), the
    task, its hidden tests, the toolchain, its project environment and the harness at its pinned
    version."""
    trees = {t.pack.fixture_dir: tree_digest(t.pack.fixture_dir) for t in tasks}
    common = {"rig_version": rig_version(), "pack": pack.name, "pack_hash": pack_digest(pack)}
    pins = {}
    for task in tasks:
        env = project_envs.get(task.id)
        pins[task.id] = Pins(
            fixture_hash=trees[task.pack.fixture_dir],
            base_tree=task.spec.base,
            task_hash=tree_digest(task.dir),
            hidden_tests_hash=tree_digest(task.hidden_dir),
            harness_version=adapter_for(experiment, task).version(),
            **common,
            **_tool_versions(env),
            toolchain_hash=toolchain_digest(),
            environment_hash=env.hash if env else None,
            environment_packages=env.packages_digest if env else None,
        )
    return pins


def _tool_versions(project_env: ProjectEnv | None) -> dict[str, str]:
    """The interpreter, ruff and pytest that verify: the project environment's when the pack has
    one, else the rig's own ("none" for a tool that is not installed there)."""
    if project_env is not None:
        return {
            "python_version": project_env.python_version,
            "ruff_version": project_env.version("ruff") or "none",
            "pytest_version": project_env.version("pytest") or "none",
        }
    versions = {"python_version": platform.python_version()}
    for tool in ("ruff", "pytest"):
        try:
            versions[f"{tool}_version"] = dist_version(tool)
        except PackageNotFoundError:
            versions[f"{tool}_version"] = "none"
    return versions


def agent_readable(environments: list[ProjectEnv]) -> list[Path]:
    """What the sandbox shows an agent even inside the folders it hides: the interpreters, node,
    the harness CLIs (the pinned ones and the versions installed into the cache, harnesses.cli), the
    egress relay, and the project `environments` of its own task (RunContext.confinement_for).
    Calibration's leak probe reads the same list."""
    return [
        *_agent_runtime(),
        harness_cache(),
        *(path for env in environments for path in env.visible()),
    ]


def _agent_runtime() -> list[Path]:
    """What an agent needs to see even inside hidden folders: interpreters, node, and the
    harnesses package (the pinned CLIs under harnesses/node, adapters' own agent scripts) and the
    egress relay, which runs inside the sandbox before the agent."""
    node = shutil.which("node")
    harnesses_dir = Path(harnesses.registry.__file__).resolve().parent
    paths = [Path(sys.prefix), Path(sys.base_prefix), harnesses_dir, RELAY]
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


def _check_environment(store: ResultsStore, pack: Pack, project_envs: dict[str, ProjectEnv | None]) -> None:
    """Refuse to add runs in another project environment than the recorded ones of their task were
    made in: its packages are part of what every run measured."""
    for run in store.read_runs():
        if run.get("task") not in project_envs:
            continue
        env = project_envs[run["task"]]
        want = (env.hash, env.packages_digest) if env else (None, None)
        pins = run.get("pins") or {}
        had = (pins.get("environment_hash"), pins.get("environment_packages"))
        if had != want:
            raise ExperimentError(
                f"{store.root} holds runs made in another project environment of pack {pack.name!r} "
                f"({(had[0] or 'none')[:12]}, now {(want[0] or 'none')[:12]}); restore the pack's "
                "[environment] and lock, or give the experiment a new name"
            )


def _now() -> datetime:
    return datetime.now(UTC)


# The steps of one run (docs/design.md), in order: a failure names the step it happened in.
STEPS = ("prepare", "agent", "collect", "protect", "check", "hidden", "record")
# How long an interrupted experiment waits for its runs in flight to end and remove their copies.
STOP_WAIT_S = 5.0


def attempt_of(ctx: RunContext, item: PlanItem, number: int, folder: Path) -> Attempt:
    """Attempt `number` of `item`, its artifacts in `folder`, as the steps see it."""
    task = ctx.tasks[item.task]
    pins = ctx.pins[task.id]
    if item.condition in ctx.harness_versions:
        pins = pins.model_copy(update={"harness_version": ctx.harness_versions[item.condition]})
    return Attempt(
        experiment=ctx.experiment,
        item=item,
        task=task,
        condition=ctx.conditions[item.condition],
        pins=pins,
        sandbox=ctx.sandbox,
        number=number,
        folder=folder,
        artifacts=folder.relative_to(ctx.store.root).as_posix(),
        started=_now(),
        workspaces=ctx.runs_root / ctx.experiment.name,
        scratch=ctx.scratch,
        secrets=ctx.secrets,
        network=ctx.network,
        project_env=ctx.project_envs.get(task.id),
    )


def run_one(item: PlanItem, ctx: RunContext, number: int | None = None) -> tuple[dict, Path]:
    """Run one attempt of `item` through the steps; return its redacted record and folder.

    The attempt is the next of its run id, or `number` (a Dask worker runs the attempt its
    coordinator numbered). Any exception inside the attempt becomes its record (infra rule
    `rig_error`, the traceback in the attempt folder), so one run never takes down an experiment.
    Only a results folder the store cannot write raises.
    """
    number, folder = ctx.store.new_attempt_dir(item.run_id, number)
    attempt = attempt_of(ctx, item, number, folder)
    trail = Trail(stopping=ctx.stopping)
    run: AgentRun | None = None
    try:
        adapter = adapter_for(
            ctx.experiment,
            attempt.task,
            ctx.confinement_for(attempt.task.id),
            attempt.condition.harness_version,
        )
        trail.enter("prepare")
        prepared = prepare(attempt, trail=trail)
        trail.enter("agent")
        run = agent(attempt, adapter=adapter, workdir=prepared.workdir)
        trail.enter("collect")
        collected = collect(attempt, trail=trail, adapter=adapter, run=run, prepared=prepared)
        tampering, verified = Tampering(), Verified()
        if collected.workspace.limit is None:
            trail.enter("protect")
            tampering = protect(prepared, collected=collected)
            sandbox = ctx.confinement_for(attempt.task.id).sandbox
            verified = verify(attempt, trail=trail, collected=collected, sandbox=sandbox)
        trail.enter("record")
        result = record(
            attempt,
            trail=trail,
            adapter=adapter,
            run=run,
            collected=collected,
            tampering=tampering,
            verified=verified,
        )
    except Exception as exc:  # any failure of the rig in this attempt is recorded, never raised
        result = rig_error_record(attempt, trail=trail, run=run, exc=exc)
    finally:
        left = _clean_up(trail, ctx.keep_workspaces)
    if left:
        result = result.model_copy(update={"warnings": [*result.warnings, *left]})
    data = ctx.redactor.value(result.model_dump(mode="json"))
    write_artifact(folder / "record.json", json.dumps(data, indent=2, sort_keys=True) + "\n")
    ctx.redactor.tree(folder)
    return data, folder


def _clean_up(trail: Trail, keep: bool) -> list[str]:
    """Remove the attempt's workspace and copy (however hostile), side by side, unless asked to
    `keep` them; warnings for what stayed."""
    for root in trail.trees:
        forget_bytecode(default_pycache(), root)
    if keep:
        trail.release(kept=True)
        return []
    problems = remove_trees(trail.trees)
    trail.release(kept=False)
    return [f"workspace not removed: {problem}" for problem in problems if problem]


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
    sequential: "SequentialResult | None" = None
    """The `[stopping]` rule's test as the records stand; None without one."""

    @property
    def decided(self) -> bool:
        """The `[stopping]` rule decided: no new run starts, runs in flight finish and are recorded."""
        return self.sequential is not None and self.sequential.stopped_at is not None


class SequentialMonitor:
    """The `[stopping]` rule of an experiment, re-evaluated from its records as each one lands."""

    def __init__(self, ctx: RunContext, items: list[PlanItem]) -> None:
        # Imported here: the statistics (and pandas with them) stay out of `rig --help`.
        from rig.analysis.sequential import sequential_result

        self._evaluate = sequential_result
        self.stopping = ctx.experiment.stopping
        self.items = items
        self.outcomes = _outcomes(ctx.store)
        quarantined = _quarantine_counts(ctx.store)
        self.exhausted = {
            run
            for run, n in quarantined.items()
            if n >= ctx.experiment.max_attempts and run not in self.outcomes
        }

    def result(self) -> "SequentialResult":
        return self._evaluate(self.stopping, self.items, self.outcomes, self.exhausted)

    def record(self, run_id: str, success: bool | None) -> "SequentialResult":
        """A scored run (`success`) or one out of attempts (None) landed; the test as it now stands."""
        if success is None:
            self.exhausted.add(run_id)
        else:
            self.outcomes[run_id] = success
        return self.result()


def _outcomes(store: ResultsStore) -> dict[str, bool]:
    """Success by run id of the scored records, read through the results cache."""
    table = runs_cache.scored(store, ["run_id", "success"])
    return dict(
        zip(table.column("run_id").to_pylist(), map(bool, table.column("success").to_pylist()), strict=True)
    )


def _quarantine_counts(store: ResultsStore) -> Counter[str]:
    """Infrastructure-failed attempts per run id, read through the results cache."""
    return Counter(runs_cache.quarantined(store).column("run_id").to_pylist())


def sequential_state(ctx: RunContext, items: list[PlanItem]) -> "SequentialResult | None":
    """The `[stopping]` rule's test from the records alone (None without `[stopping]`)."""
    return SequentialMonitor(ctx, items).result() if ctx.experiment.stopping is not None else None


def pending_items(ctx: RunContext, items: list[PlanItem]) -> tuple[list[PlanItem], dict[str, int]]:
    """Plan items without a scored record and with attempts left; also quarantine counts per run."""
    ctx.store.repair()
    done = _outcomes(ctx.store)
    quarantined = _quarantine_counts(ctx.store)
    pending = [
        i for i in items if i.run_id not in done and quarantined[i.run_id] < ctx.experiment.max_attempts
    ]
    return pending, dict(quarantined)


class Executor(Protocol):
    """Where the attempts of an experiment run: this process's threads, or Dask workers."""

    slots: int
    """How many attempts may be in flight at once."""

    def submit(self, item: PlanItem) -> Future:
        """Start the next attempt of `item`; the future gives its redacted record and folder."""

    def interrupt(self) -> None:
        """Stop now, waiting for nothing: kill the agents, drop what has not started, release what
        the executor holds."""

    def close(self) -> None:
        """Everything has finished: release what the executor holds."""


class LocalExecutor:
    """The experiment's `workers` threads of this process."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.slots = ctx.experiment.workers
        self.pool = ThreadPoolExecutor(max_workers=self.slots)

    def submit(self, item: PlanItem) -> Future:
        return self.pool.submit(run_one, item, self.ctx)

    def interrupt(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        kill_running_commands()
        try:
            kill_running_agents()
        except ContainmentError as exc:
            # The interruption stays the reason the command ends; the survivors are named.
            print(f"warning: {exc}", file=sys.stderr)

    def close(self) -> None:
        self.pool.shutdown(wait=True)


def execute(
    ctx: RunContext,
    items: list[PlanItem],
    on_update: Callable[[Progress, dict | None], None] | None = None,
    executor: Executor | None = None,
) -> Progress:
    """Run every pending item on `executor` (default: the experiment's workers in this process);
    quarantine and rerun infra failures."""
    with ctx.store.writer():
        # Helpers of agents whose runner was killed (kill -9) would still be writing somewhere.
        reap_orphans()
        _remove_copies(ctx)
        ctx.store.repair()
        # What runs in flight left when a runner was killed: redacted, kept as evidence, removed.
        for line in clean_up(ctx.store, ctx.runs_root / ctx.experiment.name, ctx.redactor).lines():
            print(line, file=sys.stderr)
        pending, quarantined = pending_items(ctx, items)
        monitor = SequentialMonitor(ctx, items) if ctx.experiment.stopping is not None else None
        budget = None
        if ctx.experiment.max_cost_usd is not None or ctx.experiment.max_runs is not None:
            budget = BudgetMonitor(ctx.experiment, ctx.store, len(items), len(pending))
        progress = Progress(total=len(pending), sequential=monitor.result() if monitor else None)
        queue = deque(pending)
        attempts = Counter(quarantined)
        running: dict[Future, PlanItem] = {}
        executor = executor or LocalExecutor(ctx)
        try:
            _drive(ctx, executor, queue, running, attempts, progress, on_update, monitor, budget)
        except BaseException:
            # Ctrl-C, SIGTERM or a store that cannot write: nothing of a run in flight is appended
            # (its attempt folder stays, a resume reruns it). Every agent and verification process
            # is killed; runs in flight end at their next step, removing their copies, but a worker
            # may be stuck inside a run, so they are waited for only briefly.
            ctx.stopping.set()
            executor.interrupt()
            wait(running, timeout=STOP_WAIT_S)
            _remove_copies(ctx)
            raise
        executor.close()
        ctx.scratch.close()
    return progress


def _remove_copies(ctx: RunContext) -> None:
    for problem in ctx.scratch.remove_copies():
        print(f"warning: verification copy not removed: {problem}", file=sys.stderr)
    ctx.scratch.close()


def _drive(
    ctx: RunContext,
    executor: Executor,
    queue: deque[PlanItem],
    running: dict[Future, PlanItem],
    attempts: Counter,
    progress: Progress,
    on_update: Callable[[Progress, dict | None], None] | None,
    monitor: SequentialMonitor | None = None,
    budget: BudgetMonitor | None = None,
) -> None:
    """Submit, collect and record runs until the queue is empty or the experiment stops (a stop
    rule, a full disk, the `[stopping]` rule's decision, or the budget: runs in flight still finish
    and are recorded)."""
    exp = ctx.experiment
    consecutive_infra = 0
    over_budget = False  # whether the budget kept the last round from starting a run
    while queue or running:
        over_budget = False
        while queue and len(running) < executor.slots and progress.stopped is None and not progress.decided:
            if budget is not None and not budget.allows(len(running)):
                over_budget = True
                break
            item = queue.popleft()
            running[executor.submit(item)] = item
        if not running:
            break
        finished, _ = wait(running, return_when=FIRST_COMPLETED)
        for future in finished:
            item = running.pop(future)
            try:
                record, _folder = future.result()
            except Exception as exc:  # the attempt folder itself could not be written
                record = _unrecorded(ctx, item, exc)
            if budget is not None:
                budget.record(record, scored=not record["infra"]["is_infra"])
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
                    if monitor is not None:
                        progress.sequential = monitor.record(item.run_id, None)
            else:
                ctx.store.append_run(record)
                consecutive_infra = 0
                progress.done += 1
                progress.successes += bool(record["success"])
                if monitor is not None:
                    progress.sequential = monitor.record(item.run_id, bool(record["success"]))
            infra = record["infra"]
            if infra["rule"] == DISK_FULL and progress.stopped is None:
                # Every run after it would fail the same way, and its disk takes the records too.
                progress.stopped = (
                    f"stopped: {infra['detail']} of run {item.run_id}; free space on it, then rerun to resume"
                )
            broken = sorted({f["rule"] for f in record.get("audit", [])} & STOP_RULES)
            if broken and progress.stopped is None:
                progress.stopped = (
                    f"stopped: run {item.run_id} changed the rig's own files ({', '.join(broken)}); "
                    "restore them (git checkout, reinstall the venv) before rerunning"
                )
            if consecutive_infra >= exp.max_consecutive_infra and progress.stopped is None:
                if infra["rule"] == "rig_error":
                    cause = f"last: {infra['detail']}; its traceback.txt has the details"
                    fix = "fix that"
                elif infra["rule"] in RIG_SIDE_RULES:
                    cause, fix = f"last: {infra['detail']}", "check the Dask workers"
                else:
                    cause, fix = f"last: {infra['rule']}", "fix the provider"
                progress.stopped = (
                    f"stopped after {consecutive_infra} infrastructure failures in a row ({cause}); "
                    f"{fix}, then rerun to resume"
                )
            if on_update:
                on_update(progress, record)
    if over_budget and budget is not None and progress.stopped is None:
        progress.stopped = budget.stop_message()


def _unrecorded(ctx: RunContext, item: PlanItem, exc: Exception) -> dict:
    """The infrastructure record of an attempt whose folder could not be made (a full disk)."""
    attempt = attempt_of(ctx, item, 0, ctx.store.root / "runs" / item.run_id)
    trail = Trail(step="attempt folder")
    return ctx.redactor.value(
        rig_error_record(attempt, trail=trail, run=None, exc=exc).model_dump(mode="json")
    )


def experiment_plan(ctx: RunContext) -> list[PlanItem]:
    return plan(ctx.experiment, list(ctx.tasks))
