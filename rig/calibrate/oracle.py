"""`rig calibrate`: the rig proves a pack's oracle before any agent runs.

(a) the clean fixture passes the gate; (b) every task's baseline fails where task.toml says;
(c) every reference solution passes the gate and the hidden tests; (d) nothing an agent can read
holds a task's answer (rig.calibrate.leak); (e) every decoy fails where task.toml says; (f) the
pack's fixture, tasks and hidden tests are byte-identical before and after. Each item runs in its
own fresh copy of the fixture.

A calibration that passes leaves its pins (the fixture's, each task's and its hidden tests' hashes)
in the user's cache, `$RIG_CALIBRATION_DIR` else `$XDG_CACHE_HOME/rig/calibration`: `rig run`'s
preflight refuses a pack changed since (rig.run.preflight).
"""

import hashlib
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from rig.calibrate.leak import probe
from rig.confine.proc import kill_running_commands
from rig.confine.project_env import ProjectEnv
from rig.env.activate import activate_each, written_into
from rig.packs.manifest import pack_digest
from rig.paths import REPO_ROOT
from rig.run.runner import agent_readable
from rig.schema import (
    IN_FOLDER,
    CalibrationReport,
    Expectation,
    Item,
    ItemResult,
    Pack,
    Placement,
    Task,
    Verification,
)
from rig.verify.checks import default_pycache, forget_bytecode, place_before_gate, run_check, run_hidden
from rig.verify.judged import judge_hidden
from rig.workspace.bases import bases_root
from rig.workspace.build import PatchError, apply_patch, copy_fixture, tree_digest
from rig.workspace.scope import patch_out_of_scope


def plan(tasks: list[Task]) -> list[Item]:
    """The clean fixture, then per task: baseline, reference solution, each decoy."""
    items = [Item(name="clean fixture", kind="clean")]
    for task in tasks:
        setup = task.setup_patch
        items.append(
            Item(
                name=f"{task.id} baseline",
                kind="baseline",
                task=task,
                patches=[setup],
                expect=task.spec.baseline,
            )
        )
        items.append(
            Item(name=f"{task.id} solution", kind="solution", task=task, patches=[setup, task.solution_patch])
        )
        items.append(Item(name=f"{task.id} leak", kind="leak", task=task))
        for decoy_name, decoy in sorted(task.spec.decoys.items()):
            items.append(
                Item(
                    name=f"{task.id} decoy {decoy_name}",
                    kind="decoy",
                    task=task,
                    patches=[setup, task.decoy_patch(decoy_name)],
                    expect=decoy,
                )
            )
    return items


SHOWN_TESTS = 3


def _short(tests: list[str]) -> str:
    """Test names without their module, the first few only: --json has the full list."""
    names = [t.split("::", 1)[-1] for t in tests]
    more = len(names) - SHOWN_TESTS
    return ", ".join(names[:SHOWN_TESTS]) + (f", +{more} more" if more > 0 else "")


def _describe(v: Verification) -> str:
    parts = []
    if v.check.failed:
        parts.append("check " + ",".join(v.check.failed))
    if v.hidden is not None and v.hidden.failed:
        parts.append(f"{len(v.hidden.failed)} hidden ({_short(v.hidden.failed)})")
    errors = [e for e in (v.check.error, v.hidden.error if v.hidden else None) if e]
    return "; ".join(parts + errors) or "nothing"


def _mismatch(kind: str, got: list[str], want: list[str]) -> list[str]:
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    out = []
    if missing:
        out.append(f"{kind} declared but passing: {', '.join(missing)}")
    if extra:
        out.append(f"{kind} failing but undeclared: {', '.join(extra)}")
    return out


def judge(item: Item, v: Verification) -> tuple[bool, str]:
    """Turn one verification into a calibration verdict and its reason."""
    if item.kind == "clean":
        if v.check.ok:
            return True, "clean fixture passes the gate"
        return False, f"clean fixture fails the gate: {_describe(v)}"
    if item.kind == "solution":
        if v.success:
            return True, f"reference solution passes the gate and {v.hidden.collected} hidden tests"
        return False, f"reference solution fails: {_describe(v)}"
    if v.success:
        return False, f"{item.kind} PASSES verification: the oracle has no teeth for it"
    expect = item.expect or Expectation()
    problems = _mismatch("check stages", v.check.failed, expect.fails_stages) + _mismatch(
        "hidden tests", v.hidden.failed if v.hidden else [], expect.fails_hidden
    )
    if problems:
        return False, f"fails at {_describe(v)}, not as task.toml says: " + "; ".join(problems)
    return True, f"fails as expected: {_describe(v)}"


def verify_patches(
    pack: Pack,
    patches: list[Path],
    hidden_dir: Path | None,
    scratch: Path,
    hidden_runs: int = 1,
    *,
    project_env: ProjectEnv | None,
    placement: Placement = IN_FOLDER,
) -> list[Verification]:
    """Verify a fresh copy of `pack`'s fixture in `scratch` with `patches` applied: the gate once
    (with hidden tests at their own paths already in place), then the hidden tests in `hidden_dir`
    (None: none; run where `placement` says) `hidden_runs` times in that same workspace,
    so a test whose verdict depends on what an earlier run left behind shows as flaky. One
    Verification per hidden run. Raises PatchError for a patch that does not apply.

    `project_env` is the pack's project environment as its caller activated it once
    (rig.env.activate.activate; None for a pack without [environment]). Verification bytecode goes
    to the shared prefix (rig.verify.checks.default_pycache); the workspace's own is dropped with
    `scratch`.
    """
    home = scratch / "home"
    home.mkdir(parents=True)
    work = copy_fixture(pack.fixture_dir, scratch / "work")
    for patch in patches:
        apply_patch(work, patch)
    pycache = default_pycache()
    place_before_gate(work, hidden_dir, placement)
    check = run_check(work, home, pack.spec.gate, pycache=pycache, project_env=project_env)
    runs = []
    for n in range(hidden_runs if hidden_dir is not None else 1):
        hidden = None
        if hidden_dir is not None:
            junit = scratch / f"hidden-junit-{n}.xml"
            hidden = run_hidden(
                work,
                hidden_dir,
                junit,
                home,
                pack.spec.runner,
                pycache=pycache,
                project_env=project_env,
                placement=placement,
            )
        runs.append(Verification(check=check, hidden=hidden))
    forget_bytecode(pycache, work)
    return runs


class Measurements:
    """Verifications made earlier in this process, by everything that decides their outcome: the
    starting tree's files, the pack's gate and runner, the patches' bytes, the hidden tests' files
    and where they run, and the environment. `rig task mine` records what it measures; its
    calibration of the tasks it made judges the verification of exactly the same inputs from here
    instead of running it again (each hidden verdict there already held over repeated runs). A
    task whose stored files differ in any byte from what was measured is verified afresh."""

    def __init__(self) -> None:
        self._found: dict[str, Verification] = {}
        self._trees: dict[Path, str] = {}
        self._lock = threading.Lock()

    def _tree(self, root: Path) -> str:
        # Starting trees (the fixture, a base) do not change while one mining runs: hashed once.
        with self._lock:
            known = self._trees.get(root)
        if known is None:
            known = tree_digest(root)
            with self._lock:
                self._trees[root] = known
        return known

    def key(
        self,
        pack: Pack,
        patches: list[Path],
        hidden_dir: Path | None,
        placement: Placement,
        project_env: ProjectEnv | None,
    ) -> str:
        """The identity of a verification's inputs."""
        parts = [
            self._tree(pack.fixture_dir),
            pack.spec.gate.model_dump_json(),
            pack.spec.runner.model_dump_json(),
            *(hashlib.sha256(patch.read_bytes()).hexdigest() for patch in patches),
            tree_digest(hidden_dir) if hidden_dir is not None else "no hidden tests",
            placement.model_dump_json(),
            f"{project_env.hash} {project_env.packages_digest}"
            if project_env is not None
            else "no environment",
        ]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()

    def verify(
        self,
        pack: Pack,
        patches: list[Path],
        hidden_dir: Path | None,
        scratch: Path,
        hidden_runs: int = 1,
        *,
        project_env: ProjectEnv | None,
        placement: Placement = IN_FOLDER,
    ) -> list[Verification]:
        """verify_patches, its first verification kept under its inputs' key (taken before it runs)."""
        found = self.key(pack, patches, hidden_dir, placement, project_env)
        runs = verify_patches(
            pack, patches, hidden_dir, scratch, hidden_runs, project_env=project_env, placement=placement
        )
        with self._lock:
            self._found[found] = runs[0]
        return runs

    def get(
        self,
        pack: Pack,
        patches: list[Path],
        hidden_dir: Path | None,
        placement: Placement,
        project_env: ProjectEnv | None,
    ) -> Verification | None:
        """The verification kept for exactly these inputs, if any."""
        found = self.key(pack, patches, hidden_dir, placement, project_env)
        with self._lock:
            return self._found.get(found)


def run_item(
    item: Item,
    pack: Pack,
    scratch: Path,
    project_env: ProjectEnv | None,
    measurements: Measurements | None = None,
) -> ItemResult:
    """Build the item's workspace in `scratch`, verify it (in `project_env`) and judge the outcome;
    a verification `measurements` holds for the same inputs is judged instead of a new one."""
    start = time.monotonic()
    task_id = item.task.id if item.task else None
    hidden = item.task.hidden_dir if item.task else None
    placement = item.task.placement if item.task else IN_FOLDER
    known = None
    if measurements is not None:
        try:
            known = measurements.get(pack, item.patches, hidden, placement, project_env)
        except OSError:
            known = None

    def result(passed: bool, reason: str, v: Verification | None = None) -> ItemResult:
        return ItemResult(
            name=item.name,
            kind=item.kind,
            task=task_id,
            passed=passed,
            reason=reason,
            check_failed=v.check.failed if v else [],
            hidden_failed=v.hidden.failed if v and v.hidden else [],
            wall_s=round(time.monotonic() - start, 3),
            reused=known is not None,
        )

    try:
        (verification,) = (
            [known]
            if known is not None
            else verify_patches(
                pack, item.patches, hidden, scratch, project_env=project_env, placement=placement
            )
        )
    except PatchError as exc:
        return result(False, str(exc))
    if item.task is not None and verification.hidden is not None:
        verification = Verification(
            check=verification.check, hidden=judge_hidden(verification.hidden, item.task.judged)
        )
    passed, reason = judge(item, verification)
    if passed and item.kind == "solution" and item.task is not None:
        outside = patch_out_of_scope(item.task.solution_patch, item.task.spec)
        if outside:
            passed = False
            reason = (
                f"reference solution changes files outside the task's scope: {', '.join(outside)}; "
                "widen scope in task.toml"
            )
    return result(passed, reason, verification)


def _environment_written(env: ProjectEnv | None, since: float) -> ItemResult | None:
    """A failing item when the gate or the hidden tests wrote into the project environment (which
    a run's sandbox shows read-only, so the same commands fail there; without one, the run fails
    its audit); the environment is then rebuilt at its next use. None when it is unchanged."""
    files = written_into(env, since)
    if files is None:
        return None
    return ItemResult(
        name="environment unchanged",
        kind="fixture",
        task=None,
        passed=False,
        reason=f"the gate or the hidden tests wrote into the project environment "
        f"({', '.join(files) or 'a file'}), which runs show read-only: change the command that "
        "writes it in pack.toml",
    )


def _done(result: ItemResult) -> "Future[ItemResult]":
    future: Future[ItemResult] = Future()
    future.set_result(result)
    return future


def sealed_off(pack: Pack) -> list[Path]:
    """What the leak probe never looks through although it may lie under a place an agent can
    read: what the sandbox hides again there (the rig's own files, an installed rig's packs, this
    pack and the bases written out of it)."""
    return [REPO_ROOT, pack.root, bases_root()]


def calibrate(
    pack: Pack,
    tasks: list[Task],
    workers: int,
    on_result: Callable[[ItemResult], None] | None = None,
    keep: Path | None = None,
    measurements: Measurements | None = None,
) -> CalibrationReport:
    """Run every item of `pack`'s `tasks` in parallel, each in the project environment of the tree it
    starts from (built first if the cache lacks it: EnvError in one line if it cannot be); report
    results in plan order, the pack check last. An item whose verification `measurements` holds
    (rig task mine's) is judged on it."""
    items = plan(tasks)
    by_tree = activate_each([pack, *(t.pack for t in tasks)])
    started = time.time()
    # As a run's sandbox shows them: its task's own environment, no other.
    envs = {t.id: by_tree[t.pack.fixture_dir] for t in tasks}
    leaks = probe(
        tasks, lambda t: agent_readable([e for e in (envs[t.id],) if e is not None]), sealed_off(pack)
    )
    before = pack_digest(pack, skip_caches=False)
    root = Path(tempfile.mkdtemp(prefix="rig-calibrate-", dir=keep))
    results: list[ItemResult] = []
    pool = ThreadPoolExecutor(max_workers=max(1, workers))
    try:
        futures = []
        for i, item in enumerate(items):
            # A task with a base is verified from its own tree, in its own environment.
            start = item.task.pack if item.task else pack
            if item.kind == "leak" and item.task is not None:
                futures.append(_done(leaks[item.task.id]))
                continue
            env = by_tree[start.fixture_dir]
            futures.append(pool.submit(run_item, item, start, root / f"{i:03d}", env, measurements))
        # Waiting in plan order keeps the output stable while items finish in any order.
        for future in futures:
            results.append(future.result())
            if on_result:
                on_result(results[-1])
    except KeyboardInterrupt:
        # Ctrl-C or SIGTERM (rig.cli.common.interruptible): the items not started are dropped and
        # the commands of those running killed (they run in sessions of their own), so only what
        # is left of those few is waited for.
        kill_running_commands()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        pool.shutdown()
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)
    unchanged = pack_digest(pack, skip_caches=False) == before
    fixture_result = ItemResult(
        name="pack unchanged",
        kind="fixture",
        task=None,
        passed=unchanged,
        reason="the pack's manifest, fixture, tasks and hidden tests are byte-identical before and after"
        if unchanged
        else "the pack's files CHANGED during calibration",
    )
    if on_result:
        on_result(fixture_result)
    final = [*results, fixture_result]
    for env in {id(env): env for env in by_tree.values()}.values():
        written = _environment_written(env, started)
        if written is not None:
            if on_result:
                on_result(written)
            final.append(written)
    n_pass = sum(r.passed for r in final)
    return CalibrationReport(ok=n_pass == len(final), passed=n_pass, failed=len(final) - n_pass, items=final)
