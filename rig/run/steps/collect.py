"""Step 3, collect: the rig's own copy of the workspace, the diff, the session's metrics, the audit."""

import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harnesses.protocol import HarnessAdapter
from rig.confine.project_env import EnvironmentChanged
from rig.confine.run_budget import reconcile
from rig.confine.untrusted import (
    COPY_THREADS,
    Bounds,
    LimitExceeded,
    NoRoom,
    TreeStats,
    copy_tree,
    remove_trees,
)
from rig.env.activate import invalidate
from rig.run.steps.attempt import WORK, Attempt, Trail, write_artifact
from rig.run.steps.prepare import Prepared
from rig.schema import AgentRun, AuditFinding, Limits, Metrics, Task, WorkspaceStats
from rig.session.shell import judge
from rig.verify.audit import rig_paths_accessed, runner_probes, source_filter, toolchain_digest
from rig.workspace.build import Stager, WorkspaceError, changed_texts, collect_diff, quote_path, tree_digest
from rig.workspace.scratch import COPY_PREFIX, Scratch, on_disk


@dataclass(frozen=True)
class Collected:
    """What the rig took from the workspace once its agent was gone."""

    metrics: Metrics
    workspace: WorkspaceStats
    """What the workspace held; `limit` names the bound it passed, and then nothing below was read."""
    verify_root: Path
    """The directory of the rig's copy of the workspace."""
    paths: list[str]
    """Every file and symlink of the copy."""
    left_out: list[str]
    """The build and cache trees the copy left out (node_modules, .venv, caches), by path."""
    changed: list[str]
    """The changed files, as `git diff --name-status` names them."""
    audit: list[AuditFinding]
    diffed: bool = False
    """Whether the diff was taken: only then does `changed` say what the agent changed."""

    @property
    def verify_dir(self) -> Path:
        """The rig's copy of the workspace."""
        return self.verify_root / WORK


@dataclass(frozen=True)
class _Copy:
    root: Path
    stats: TreeStats
    limit: str | None
    """The bound of `limits` the workspace passed, if any."""
    staged: bool
    """Whether the rig's index holds the copy (the diff can be taken)."""
    paths: list[str]


def session_metrics(adapter: HarnessAdapter, run: AgentRun, task: Task) -> Metrics:
    """The metrics of the agent's saved session: parsed by its adapter, judged by the pack (what
    counts as docs, the gate and the tests), and checked against the usage a run budget counted."""
    metrics = judge(adapter.parse_session(run), task.pack.spec)
    if run.budget is not None:
        reconcile(metrics, run.budget)
    return metrics


def collect(
    attempt: Attempt, *, trail: Trail, adapter: HarnessAdapter, run: AgentRun, prepared: Prepared
) -> Collected:
    """The session's metrics, a bounded copy of the workspace under `attempt.scratch`, the diff
    against the baseline (`diff.patch` in the attempt folder) and the audit of rig.verify.audit.

    The copy goes to a directory made only now, which the agent could not name: a process that
    escaped every kill writes to a workspace nobody reads any more. A copy with no room in memory
    is made again on disk, under `attempt.workspaces`, beside the workspace. The attempt's task (and
    its pack), pins and secrets are what the audit checks the rig's own files and the session against.
    """
    task, folder, limits, scratch = attempt.task, attempt.folder, attempt.experiment.limits, attempt.scratch
    # The adapter parses the session; what counts as docs, the gate and the tests is the pack's.
    metrics = trail.metrics = session_metrics(adapter, run, task)
    try:
        copy = _copy_for_verification(prepared, limits, scratch, trail)
    except NoRoom as exc:
        if not scratch.in_memory:
            raise
        trail.warnings.append(f"{exc}; made again on disk, beside the workspace")
        place = on_disk(attempt.workspaces, "no room in memory")
        copy = _copy_for_verification(prepared, limits, place, trail)
    stats, limit = copy.stats, copy.limit
    workspace = trail.workspace = WorkspaceStats(
        files=stats.files,
        dirs=stats.dirs,
        depth=stats.depth,
        excluded=stats.excluded,
        special=[quote_path(os.fsencode(p)) for p in stats.special],
        outward_links=[quote_path(os.fsencode(p)) for p in stats.outward_links],
        limit=limit,
    )
    if stats.special:
        trail.warnings.append(
            f"workspace: {len(stats.special)} FIFOs, sockets, devices or unreadable entries left out "
            "of verification"
        )
    if stats.outward_links:
        trail.warnings.append(
            f"workspace: {len(stats.outward_links)} symlinks leading out of the workspace left out of "
            "verification"
        )
    changed: list[str] = []
    if limit is not None:
        return Collected(
            metrics=metrics,
            workspace=workspace,
            verify_root=copy.root,
            paths=copy.paths,
            left_out=stats.left_out,
            changed=changed,
            audit=[],
        )
    verify_dir = copy.root / WORK
    texts = None
    diffed = False
    if copy.staged:
        try:
            diff, changed = collect_diff(verify_dir, prepared.rig_git, prepared.baseline, staged=True)
            diffed = True
            write_artifact(folder / "diff.patch", diff)
            texts = changed_texts(verify_dir, prepared.rig_git, prepared.baseline, source_filter(task.pack))
        except WorkspaceError as exc:
            trail.warnings.append(f"diff not collected: {exc}")
    audit = _audit(attempt, texts, metrics, prepared.container)
    return Collected(
        metrics=metrics,
        workspace=workspace,
        verify_root=copy.root,
        paths=copy.paths,
        left_out=stats.left_out,
        changed=changed,
        audit=audit,
        diffed=diffed,
    )


def _copy_for_verification(prepared: Prepared, limits: Limits, place: Scratch, trail: Trail) -> _Copy:
    """The rig's copy of the workspace in a directory made now under `place` (on `trail.trees` while
    it exists), staged for the diff in the same pass.

    A copy that does not fit its room (NoRoom) is removed before this raises.
    """
    root = _new_copy_dir(place.folder)
    trail.made(root)
    limit: str | None = None
    staged = False
    # One pass reads each file once: into the copy and into the rig's index of it.
    with Stager(root / WORK, prepared.rig_git) as stager:
        try:
            stats = copy_tree(
                prepared.workdir,
                root / WORK,
                Bounds(limits.max_files, limits.max_depth),
                stager,
                threads=1 if place.in_memory else COPY_THREADS,
                room=place.room,
            )
        except LimitExceeded as exc:
            stats, limit = exc.stats, exc.what
        except NoRoom:
            remove_trees([root])
            trail.dropped(root)
            raise
        else:
            try:
                stager.finish()
                staged = True
            except WorkspaceError as exc:
                trail.warnings.append(f"diff not collected: {exc}")
    return _Copy(root=root, stats=stats, limit=limit, staged=staged, paths=stager.paths)


# How often a copy's folder is made again when it went just before the copy could be made in it.
FOLDER_TRIES = 3


def _new_copy_dir(folder: Path) -> Path:
    """A new directory for one copy in the experiment's `folder`, which is made if missing."""
    tries = FOLDER_TRIES
    while True:
        folder.mkdir(parents=True, exist_ok=True)
        try:
            return Path(tempfile.mkdtemp(prefix=COPY_PREFIX, dir=folder))
        except FileNotFoundError:
            # A runner of another experiment removed the folder, empty, in between (its sweep of
            # stale copies: rig.run.leftovers).
            tries -= 1
            if not tries:
                raise


def _audit(
    attempt: Attempt, texts: list[tuple[str, str, str]] | None, metrics: Metrics, container: Path
) -> list[AuditFinding]:
    """The audit rules of rig.verify.audit for one run, after its agent is gone: the attempt's task,
    pins and secrets, against the session's `metrics` and the agent's own `container` and attempt
    folder.

    `texts` are the changed sources (rig.workspace.build.changed_texts), None if they could not be read.
    """
    task, pins = attempt.task, attempt.pins
    findings = [
        AuditFinding(rule="rig_files_changed", detail=f"{name} {root} no longer matches its pinned hash")
        for name, root, pinned in (
            ("fixture", task.pack.fixture_dir, pins.fixture_hash),
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
    if attempt.project_env is not None:
        try:
            attempt.project_env.check_unchanged()
        except EnvironmentChanged as exc:
            # Never used again: the next build (the next `rig run`) makes it afresh.
            invalidate(attempt.project_env)
            findings.append(AuditFinding(rule="toolchain_changed", detail=str(exc)))
    if texts is None:
        findings.append(
            AuditFinding(rule="changes_unreadable", detail="the workspace's changes could not be collected")
        )
    else:
        findings += runner_probes(texts, task.pack)
    findings += rig_paths_accessed(metrics, attempt.secrets, own=[container, attempt.folder])
    return findings
