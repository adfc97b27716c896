"""`rig task mine`: a repository's own fixes become calibrated tasks of its pack.

The pack's fixture is a snapshot of the repository at one commit (pack.toml `[source]`). A commit
in that snapshot's history that changes both source files and test files is a candidate:

- its setup is the reverse of the whole commit applied to the fixture: the source goes back to
  before the fix, the tests it added disappear and the tests it changed go back to their old
  version, so the agent cannot read them;
- when that reverse does not apply (later fixes changed the same lines), or always with
  `--base parent`, the task starts at the fix's own parent instead: the fixture taken back to that
  commit, kept as a base (rig.workspace.bases) with the environment its own dependency files call
  for, and an empty setup;
- its solution is the commit's change to the source files, applied on top of the setup;
- its hidden tests are the test files it added or changed, as the snapshot has them (at its
  parent: as the fix left them);
- fail-to-pass and pass-to-pass are measured, never assumed: the hidden tests run three times
  after the fix and, when they pass there, three times before it, in the pack's own verification;
- its decoys are the solution with one of its changes left out, and the solution in its first file
  only, each kept only if it is measured to fail.

Every task made this way is then calibrated like a hand-written one before it is moved into the
pack. Each commit gets a verdict (MineVerdict): mined, or skipped with the reason.
"""

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
import tomllib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import tomli_w

from rig.calibrate.oracle import Measurements, calibrate
from rig.confine.project_env import ProjectEnv
from rig.env.activate import activate
from rig.env.identity import GENERATED_LOCK, lock_path
from rig.env.uvtool import EnvError
from rig.mine.history import Commit, MineError, Skip, Split, history, is_ancestor, repository, resolve, split
from rig.mine.patches import Patches, build, build_at_parent, decoy_patches, hidden_tests
from rig.mine.prompt import DEFAULT_TEMPLATE, issue_text
from rig.packs.tasks import TaskError, load_tasks
from rig.runners.registry import kind_of
from rig.schema import (
    BASES_DIR,
    FunnelStage,
    ItemResult,
    MinedCommit,
    MineFunnel,
    MineReport,
    MineVerdict,
    Pack,
    Placement,
    Verification,
    test_glob_problem,
)
from rig.verify.judged import judge_hidden
from rig.workspace.bases import bundle, materialize
from rig.workspace.build import PatchError, tree_digest

DEFAULT_MAX = 50
# Where a mined task starts (`rig task mine --base`).
BaseChoice = Literal["auto", "parent", "snapshot"]
# Hidden-test runs per state: a test whose verdict changes over them is flaky.
HIDDEN_RUNS = 3
TASK_TIMEOUT_S = 900
TASK_ID_WORDS_CHARS = 40
TEMPLATE_FILE = "mine-prompt.md"
HYPOTHESIS = "mined"
SHOWN = 3
PROBLEM_CHARS = 200
# Every commit's verdict, one JSON line each as it is decided, kept in the pack: a rerun with the
# same inputs reports it again instead of measuring the commit again, and a stop loses nothing.
JOURNAL = "mined.jsonl"
# Part of every verdict's inputs: raised when rig itself decides verdicts differently (2: judged by test).
MINE_FORMAT = 2
# Verdicts measured again whatever the journal says: a task that is no longer in the pack, an
# error that may not recur, a task the pack had, a calibration that depends on the machine too
# (the leak probe reads what the sandbox shows).
_MEASURED_AGAIN = frozenset({"mined", "error", "already-mined", "calibration"})


@dataclass
class Mined:
    """A measured candidate, written to the staging folder, before calibration."""

    verdict: MinedCommit
    task_dir: Path
    hidden_dir: Path
    base: str | None = None
    """The git tree hash of its base; None: it starts from the fixture."""


def _failures(v: Verification) -> str:
    hidden = v.hidden
    parts = []
    if not v.check.ok:
        stage = v.check.failed[0] if v.check.failed else ""
        problem = (v.check.results.get(stage) or [v.check.error or ""])[0]
        parts.append(
            f"the gate fails at {', '.join(v.check.failed) or '?'}" + (f": {problem}" if problem else "")
        )
    if hidden is not None and not hidden.ok:
        parts.append(hidden.error or f"hidden tests failed: {', '.join(hidden.failed[:SHOWN])}")
        first = hidden.failed[0] if hidden.failed else ""
        # A traceback's last line is the exception: what a user needs to see first.
        lines = [line.strip() for line in hidden.problems.get(first, "").splitlines() if line.strip()]
        if lines:
            parts.append(f"{first}: {lines[-1][:PROBLEM_CHARS]}")
    return "; ".join(parts) or "nothing"


def _verdicts(runs: list[Verification]) -> list[frozenset[str]]:
    return [frozenset(v.hidden.failed if v.hidden else ()) for v in runs]


def _flaky(runs: list[Verification]) -> None:
    """Skip as flaky when a hidden test's verdict changed over these runs of the same code."""
    verdicts = _verdicts(runs)
    changed: set[str] = set()
    for verdict in verdicts[1:]:
        changed |= verdict ^ verdicts[0]
    if changed:
        shown = ", ".join(sorted(changed)[:SHOWN])
        raise Skip("flaky", f"{shown} changed verdict over {HIDDEN_RUNS} runs of the same code")


@dataclass(frozen=True)
class Measured:
    """What a fix's hidden tests measured: the tests that judge the task and the baseline's failures."""

    fail_to_pass: list[str]
    pass_to_pass: list[str]
    fails_stages: list[str]
    fails_hidden: list[str]
    """The judged tests that failed (or did not run) before the fix: the baseline's expectation."""
    outside: int
    """Tests of the hidden files that never passed with the fix: outside the task."""

    @property
    def judged(self) -> frozenset[str]:
        """The tests whose outcomes decide the task (rig.verify.judged)."""
        return frozenset(self.fail_to_pass) | frozenset(self.pass_to_pass)


@dataclass(frozen=True)
class Hidden:
    """A candidate's hidden tests: their folder, and where they run."""

    dir: Path
    placement: Placement


@dataclass
class Trace:
    """How far a commit got (the last funnel stage it passed) and where its task starts."""

    stage: FunnelStage = "read"
    base: Literal["snapshot", "parent"] | None = None

    def reached(self, stage: FunnelStage) -> None:
        self.stage = stage


def measure(
    pack: Pack,
    patches: Patches,
    hidden: Hidden,
    scratch: Path,
    env: ProjectEnv | None,
    reached: Callable[[FunnelStage], None],
    measurements: Measurements,
) -> Measured:
    """Run the hidden tests after the fix, then before it (in `env`): which pass after (the judged
    tests: rig.verify.judged), which of those did not pass before, and that no verdict changes over
    HIDDEN_RUNS runs of the same code; `reached` hears each step passed. A test of the hidden files
    that skips or fails with the fix is outside the task. The fixed code first: a fix whose gate
    fails, or whose tests none pass (most at an old parent, where today's environment breaks
    something), is skipped without measuring the code before it."""

    def runs(applied: list[Path], name: str) -> list[Verification]:
        return measurements.verify(
            pack,
            applied,
            hidden.dir,
            scratch / name,
            HIDDEN_RUNS,
            project_env=env,
            placement=hidden.placement,
        )

    after = runs([patches.setup, patches.solution], "after")
    _flaky(after)
    reached("not_flaky")
    fixed = after[0]
    ran = fixed.hidden
    if not fixed.check.ok or ran is None or any(t.startswith("<") for t in ran.failed) or not ran.passed:
        raise Skip("solution-fails", f"with the fix applied: {_failures(fixed)}")
    # A test passes with the fix when it passed in every run (a skip never flips to a failure).
    judged = frozenset.intersection(*(frozenset(v.hidden.passed if v.hidden else ()) for v in after))
    reached("passed_after")
    before = runs([patches.setup], "before")
    _flaky(before)
    broken = before[0].hidden
    if broken is None:
        raise Skip("no-fail-to-pass", "before the fix the hidden tests did not run")
    markers = [t for t in broken.failed if t.startswith("<")]
    if markers:
        raise Skip(
            "no-fail-to-pass", f"before the fix the hidden tests do not run ({broken.error or markers[0]})"
        )
    passed_before = frozenset(broken.passed)
    if judged <= passed_before:
        outside = ran.failed + ran.skipped
        also = f" (and {len(outside)} that fail or skip with it too)" if outside else ""
        raise Skip(
            "no-fail-to-pass", f"every hidden test that passes with the fix already passes before it{also}"
        )
    reached("failed_before")
    return Measured(
        fail_to_pass=sorted(judged - passed_before),
        pass_to_pass=sorted(judged & passed_before),
        fails_stages=list(before[0].check.failed),
        fails_hidden=sorted(judge_hidden(broken, judged).failed),
        outside=len({*ran.failed, *ran.skipped} - judged),
    )


def decoys(
    pack: Pack,
    patches: Patches,
    hidden: Hidden,
    scratch: Path,
    task_dir: Path,
    env: ProjectEnv | None,
    measurements: Measurements,
    judged: frozenset[str],
) -> dict[str, dict]:
    """Write each decoy that is measured (in `env`) to fail its `judged` tests or the gate into
    task_dir/decoys; their task.toml entries."""
    kept: dict[str, dict] = {}
    for name, reason, body in decoy_patches(patches.solution.read_bytes()):
        patch = scratch / f"decoy-{name}.patch"
        patch.write_bytes(body)
        try:
            (v,) = measurements.verify(
                pack,
                [patches.setup, patch],
                hidden.dir,
                scratch / f"decoy-{name}",
                project_env=env,
                placement=hidden.placement,
            )
        except PatchError:
            continue
        if v.hidden is not None:
            v = Verification(check=v.check, hidden=judge_hidden(v.hidden, judged))
        if v.success or (v.hidden is not None and any(t.startswith("<") for t in v.hidden.failed)):
            continue
        (task_dir / "decoys").mkdir(exist_ok=True)
        shutil.copyfile(patch, task_dir / "decoys" / f"{name}.patch")
        kept[name] = {
            "reason": reason,
            "fails_stages": list(v.check.failed),
            "fails_hidden": sorted(v.hidden.failed) if v.hidden else [],
        }
    return kept


def task_id(title: str, sha: str) -> str:
    """A task id from the issue's title and the commit: `fix_last_page_has_next_1a2b3c4`."""
    words = re.sub(r"[^a-z0-9]+", " ", title.lower()).split()
    kept: list[str] = []
    for word in words:
        if kept and len("_".join([*kept, word])) > TASK_ID_WORDS_CHARS:
            break
        kept.append(word)
    return "_".join([*kept, sha[:7]]) if kept else f"fix_{sha[:7]}"


@dataclass(frozen=True)
class Options:
    """What `rig task mine` was asked, beyond the pack and the commits."""

    repo: Path
    snapshot: str
    base: BaseChoice
    template: str
    test_globs: list[str]
    timeout_s: int
    known: dict[str, str]
    """Commits already mined into the pack, to their task ids."""
    environment: ProjectEnv | None
    """The pack's project environment, activated once for every commit."""
    measurements: Measurements
    """Every verification made, which the calibration of the tasks made judges instead of
    running the same again."""


def _at_snapshot_or_parent(
    commit: Commit, files: Split, pack: Pack, options: Options, scratch: Path, trace: Trace
) -> tuple[Patches, Pack, Path | None, str | None]:
    """The commit's patches, the pack as its task sees it, the tree holding its tests (None: the
    snapshot) and its base (None: the fixture): reversed on the snapshot, or at its parent when
    that does not apply or `--base parent` says so."""
    if options.base != "parent":
        try:
            patches = build(options.repo, commit, files, pack, scratch / "snapshot")
        except Skip as skip:
            if options.base == "snapshot" or skip.verdict != "conflict":
                raise
        else:
            trace.base = "snapshot"
            return patches, pack, None, None
    at = build_at_parent(options.repo, commit, files, pack, options.snapshot, scratch / "parent")
    trace.base = "parent"
    return at.patches, pack.at(materialize(pack.root, at.tree)), at.tests, at.tree


@dataclass(frozen=True)
class AtParentEnv:
    """Where a task at its parent is measured: the pack as it sees it, its environment, and why it
    is the fixture's (None: its own)."""

    start: Pack
    env: ProjectEnv | None
    fallback: str | None


def _environment_at(start: Pack, commit: Commit) -> AtParentEnv:
    """The environment of the fix's parent, built now if the cache lacks it; when its dependency
    files make none (an extra or a lock that did not exist yet, an index that no longer has a pin),
    the fixture's, in which measuring then decides; Skip when neither can be had."""
    try:
        return AtParentEnv(start, activate(start), None)
    except EnvError as exc:
        own = f"its parent {commit.parents[0][:12]}'s own environment cannot be built: {exc}"
    fixture = start.at(start.fixture_dir, own_environment=False)
    try:
        return AtParentEnv(fixture, activate(fixture), own)
    except EnvError as exc:
        raise Skip("environment", f"{own}; nor can the fixture's: {exc}") from None


def mine_commit(
    commit: Commit, pack: Pack, options: Options, staging: Path, scratch: Path, trace: Trace
) -> Mined:
    """Measure one commit and write its task into `staging`, or raise Skip; `trace` hears each
    step of the funnel it passes, and where its task starts."""
    reached = trace.reached
    if len(commit.parents) > 1:
        raise Skip("merge", "a merge commit: its change is its parents' fixes")
    if not commit.parents:
        raise Skip("root", "the first commit: there is no before")
    if commit.sha in options.known:
        raise Skip("already-mined", f"already in the pack as {options.known[commit.sha]}")
    files = split(options.repo, commit, pack, options.test_globs)
    reached("changes")
    scratch.mkdir(parents=True)
    # The reverse first: a test a later commit deleted is a conflict, not a missing file.
    patches, start, tests_from, base = _at_snapshot_or_parent(commit, files, pack, options, scratch, trace)
    hidden = scratch / "hidden"
    placement = hidden_tests(files, start, hidden, tests_from)
    reached("applied")
    # Activated once per environment hash: most bases share the fixture's.
    fallback = None
    environment = options.environment
    if base is not None:
        at = _environment_at(start, commit)
        start, environment, fallback = at.start, at.env, at.fallback
    measured = measure(
        start, patches, Hidden(hidden, placement), scratch, environment, reached, options.measurements
    )
    tests = measured.fail_to_pass + measured.pass_to_pass
    prompt = issue_text(commit.subject, commit.body, files.source + files.tests, tests, options.template)
    if prompt is None:
        raise Skip("no-message", "its message says nothing once the files and tests it names are left out")
    reached("described")
    ident = task_id(prompt.splitlines()[0], commit.sha)
    task_dir, hidden_dir = staging / "tasks" / ident, staging / "hidden_tests" / ident
    task_dir.mkdir(parents=True)
    shutil.copytree(hidden, hidden_dir)
    shutil.copyfile(patches.setup, task_dir / "setup.patch")
    shutil.copyfile(patches.solution, task_dir / "solution.patch")
    kept = decoys(
        start,
        patches,
        Hidden(hidden, placement),
        scratch,
        task_dir,
        environment,
        options.measurements,
        measured.judged,
    )
    spec = {
        "id": ident,
        "hypothesis": HYPOTHESIS,
        **({"base": base} if base else {}),
        **({"environment": "fixture"} if fallback else {}),
        "hidden_at": placement.at,
        "hidden_tests": list(placement.tests),
        "timeout_s": options.timeout_s,
        "prompt": prompt,
        "baseline": {"fails_stages": measured.fails_stages, "fails_hidden": measured.fails_hidden},
        "decoys": kept,
        "source": {
            "repo": options.repo.name,
            "commit": commit.sha,
            "subject": commit.subject,
            **({"parent": commit.parents[0]} if base else {}),
            "fail_to_pass": measured.fail_to_pass,
            "pass_to_pass": measured.pass_to_pass,
        },
    }
    (task_dir / "task.toml").write_text(tomli_w.dumps(spec, multiline_strings=True))
    verdict = MinedCommit(
        commit=commit.sha,
        subject=commit.subject,
        verdict="mined",
        reason=f"{len(measured.fail_to_pass)} fail-to-pass, {len(measured.pass_to_pass)} pass-to-pass, "
        f"{len(kept)} decoys"
        + (f"; {measured.outside} tests outside it" if measured.outside else "")
        + (f"; in the fixture's environment ({fallback})" if fallback else ""),
        task=ident,
        fail_to_pass=measured.fail_to_pass,
        pass_to_pass=measured.pass_to_pass,
        decoys=sorted(kept),
        stage="described",
        base=trace.base,
    )
    return Mined(verdict, task_dir, hidden_dir, base)


def _task_tomls(pack: Pack) -> list[tuple[str, dict]]:
    """(task id, task.toml) of each of the pack's tasks that reads."""
    found = []
    if pack.tasks_dir.is_dir():
        for toml in sorted(pack.tasks_dir.glob("*/task.toml")):
            try:
                found.append((toml.parent.name, tomllib.loads(toml.read_text())))
            except (OSError, tomllib.TOMLDecodeError):
                continue
    return found


def _known(pack: Pack) -> dict[str, str]:
    known = {}
    for ident, spec in _task_tomls(pack):
        source = spec.get("source") or {}
        if isinstance(source, dict) and isinstance(source.get("commit"), str):
            known[source["commit"]] = ident
    return known


def _bases(pack: Pack) -> list[str]:
    """The bases the pack's tasks start from."""
    return [spec["base"] for _, spec in _task_tomls(pack) if isinstance(spec.get("base"), str)]


def template_for(pack: Pack, path: Path | None) -> str:
    """The prompt template: `path`, else the pack's mine-prompt.md, written with the default the
    first time so the user can edit it."""
    target = path or pack.root / TEMPLATE_FILE
    if path is None and not target.exists():
        target.write_text(DEFAULT_TEMPLATE)
    try:
        return target.read_text()
    except OSError as exc:
        raise MineError(
            f"{target}: cannot read the prompt template ({exc.strerror}); fix --template"
        ) from None


def _calibrated(
    pack: Pack, staging: Path, mined: list[Mined], workers: int, measurements: Measurements
) -> tuple[dict[str, str], list[ItemResult]]:
    """Calibrate the staged tasks like any other, judging the measurements of the same inputs
    instead of running them again; the first failure of each task that fails, and the items."""
    if not mined:
        return {}, []
    try:
        tasks = load_tasks(
            pack,
            [m.verdict.task for m in mined if m.verdict.task],
            staging / "tasks",
            staging / "hidden_tests",
        )
    except TaskError as exc:
        return {m.verdict.task or "": f"does not load: {exc}" for m in mined}, []
    report = calibrate(pack, tasks, workers, measurements=measurements)
    failures: dict[str, str] = {}
    for item in report.items:
        if not item.passed and item.task is not None:
            failures.setdefault(item.task, f"{item.name}: {item.reason}")
    # The leak probe verifies nothing: it counts as neither reused nor afresh.
    return failures, [item for item in report.items if item.kind not in ("fixture", "leak")]


def _install(pack: Pack, mined: Mined) -> None:
    ident = mined.verdict.task or ""
    # Hidden tests first: a task exists once its task.toml does, so a stop in between leaves an
    # unused hidden folder, never a task without hidden tests. Each is copied beside its place
    # (the scratch folder may be on another file system) and renamed into it in one step.
    for source, root in ((mined.hidden_dir, pack.hidden_dir), (mined.task_dir, pack.tasks_dir)):
        root.mkdir(parents=True, exist_ok=True)
        partial = root.parent / f".{root.name}-{ident}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(source, partial, symlinks=True)
        os.rename(partial, root / ident)


def inputs_digest(pack: Pack, options: "Options") -> str:
    """What decides a commit's verdict besides the commit: rig's way of mining, the pack (its
    manifest, fixture and environment), the snapshot, where tasks start, the test globs, the
    prompt template and the tasks' timeout."""
    env = options.environment
    parts = [
        str(MINE_FORMAT),
        pack.spec.model_dump_json(),
        tree_digest(pack.fixture_dir),
        f"{env.hash} {env.packages_digest}" if env is not None else "no environment",
        options.snapshot,
        options.base,
        json.dumps(options.test_globs),
        options.template,
        str(options.timeout_s),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _earlier(pack: Pack, inputs: str) -> dict[str, MinedCommit]:
    """The verdicts of the pack's journal decided for the same `inputs`, by commit, the latest
    for each; a line a stop cut short is passed over."""
    try:
        text = (pack.root / JOURNAL).read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    found: dict[str, MinedCommit] = {}
    for line in text.splitlines():
        try:
            entry = MinedCommit.model_validate_json(line)
        except ValueError:
            continue
        if entry.inputs == inputs and entry.verdict not in _MEASURED_AGAIN:
            found[entry.commit] = entry
        else:
            found.pop(entry.commit, None)
    return found


def _journal(pack: Pack, entry: MinedCommit) -> None:
    """Append `entry` to the pack's journal, in one write."""
    with (pack.root / JOURNAL).open("a", encoding="utf-8") as journal:
        journal.write(entry.model_dump_json() + "\n")


@dataclass
class _Calibration:
    """The calibration items of the tasks kept so far: judged on mining's measurements, or afresh."""

    reused: int = 0
    afresh: int = 0


def _keep(
    pack: Pack,
    staging: Path,
    mined: Mined,
    workers: int,
    measurements: Measurements,
    tally: _Calibration,
    say: Callable[[str], None],
) -> None:
    """Calibrate one task made, as rig calibrate would, and put it into the pack if it passes (its
    base first): the pack is whole at every moment, and what mining made is kept as it goes."""
    entry = mined.verdict
    say(f"calibrating {entry.task}, as rig calibrate would, on the measurements of the same files")
    failures, items = _calibrated(pack, staging, [mined], workers, measurements)
    reused = sum(item.reused for item in items)
    tally.reused += reused
    tally.afresh += len(items) - reused
    if len(items) > reused:
        afresh = f"{len(items) - reused} calibration items verified afresh"
        say(f"{afresh}: their files differ from what was measured")
    problem = failures.get(entry.task or "")
    if problem is not None:
        entry.verdict = "calibration"
        entry.reason = f"calibration failed: {problem}"
        return
    entry.stage = "calibrated"
    if (pack.tasks_dir / (entry.task or "")).exists():
        entry.verdict = "error"
        entry.reason = f"the pack already has a task named {entry.task}"
        return
    # The bundle first: a task is in the pack once its task.toml is, and its base must be there.
    if mined.base:
        bundle(pack.root, [*_bases(pack), mined.base])
    _install(pack, mined)
    entry.stage = "kept"


def mine(
    pack: Pack,
    repo: Path,
    *,
    snapshot: str | None = None,
    since: str | None = None,
    commits: list[str] | None = None,
    max_commits: int = DEFAULT_MAX,
    workers: int = 1,
    template: Path | None = None,
    test_globs: list[str] | None = None,
    timeout_s: int = TASK_TIMEOUT_S,
    base: BaseChoice = "auto",
    on_result: Callable[[MinedCommit], None] | None = None,
    say: Callable[[str], None] | None = None,
    work: Path | None = None,
) -> MineReport:
    """Mine `repo`'s history into `pack`: every commit looked at gets a verdict, appended to the
    pack's journal (JOURNAL) as soon as it is decided; each task made is calibrated at once and,
    only if it passes, moved into the pack's tasks and hidden tests. A commit the journal holds a
    verdict for, with the same inputs (inputs_digest), is reported with it, not measured again.

    `base`: where tasks start; auto: reversed on the snapshot, at the fix's parent when that does
    not apply; parent: always at the parent; snapshot: never. `on_result` hears each commit's
    measurement as it is done, in history order; `say`, what the long steps in between are doing.
    `work`: an empty folder for the scratch copies (default: a new temporary one); it is removed.
    """
    say = say or (lambda _message: None)
    root = repository(repo)
    ref = snapshot or (pack.spec.source.commit if pack.spec.source else None)
    if ref is None:
        raise MineError(
            f"{pack.root / 'pack.toml'}: no [source] commit; "
            "pass --snapshot COMMIT (the commit fixture/ was taken at)"
        )
    at = resolve(root, ref, "the snapshot commit")
    for glob in test_globs or []:
        problem = test_glob_problem(glob)
        if problem:
            raise MineError(f"--tests {glob!r} {problem}")
    if not test_globs and not pack.spec.runner.test_files and not kind_of(pack.spec.runner.kind).test_files:
        raise MineError(
            f"{pack.root / 'pack.toml'}: a {pack.spec.runner.kind} runner has no test file names; "
            "say which files are tests with --tests GLOB or [runner] test_files"
        )
    found = history(root, at, since, list(commits or []), max_commits)
    say(f"{len(found)} commits of {root.name} up to {at[:12]}; checking the fixture passes its gate")
    work = work or Path(tempfile.mkdtemp(prefix="rig-mine-"))
    verdicts: list[MinedCommit] = []
    tally = _Calibration()
    try:
        environment = activate(pack)
        measurements = Measurements()
        (clean,) = measurements.verify(pack, [], None, work / "clean", project_env=environment)
        if not clean.check.ok:
            raise MineError(
                f"{pack.root}: the fixture fails its own gate ({_failures(clean)}); "
                "fix the pack first (rig calibrate --pack)"
            )
        options = Options(
            root,
            at,
            base,
            template_for(pack, template),
            list(test_globs or []),
            timeout_s,
            _known(pack),
            environment,
            measurements,
        )
        inputs = inputs_digest(pack, options)
        earlier = _earlier(pack, inputs)
        if earlier:
            say(f"{len(earlier)} of them have a verdict for the same inputs in {JOURNAL}: not measured again")
        staging = work / "staging"

        def one(n: int, commit: Commit) -> MinedCommit | Mined:
            if commit.sha in earlier:
                return earlier[commit.sha].model_copy(update={"earlier": True})
            started = time.monotonic()
            outcome = _one(n, commit)
            entry = outcome.verdict if isinstance(outcome, Mined) else outcome
            entry.seconds = round(time.monotonic() - started, 1)
            return outcome

        def _one(n: int, commit: Commit) -> MinedCommit | Mined:
            trace = Trace()
            try:
                if commits and not is_ancestor(root, commit.sha, at):
                    raise Skip(
                        "outside",
                        f"not in the history of the snapshot {at[:12]}: its fix is not in the fixture",
                    )
                return mine_commit(commit, pack, options, staging, work / f"{n:04d}", trace)
            except Skip as skip:
                return _skipped(commit, skip.verdict, skip.reason, trace)
            # One commit never stops the mining: whatever went wrong is its verdict.
            except Exception as exc:
                problem = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
                return _skipped(commit, "error", problem, trace)

        pool = ThreadPoolExecutor(max_workers=max(1, workers))
        try:
            for outcome in pool.map(one, range(len(found)), found):
                if isinstance(outcome, Mined):
                    _keep(pack, staging, outcome, workers, measurements, tally, say)
                    outcome = outcome.verdict
                if not outcome.earlier:
                    outcome.inputs = inputs
                    _journal(pack, outcome)
                verdicts.append(outcome)
                if on_result:
                    on_result(outcome)
        finally:
            # Every commit is measured by now, unless an interruption stops the mining: then none
            # waits for the commits in flight.
            pool.shutdown(wait=False, cancel_futures=True)
        _prune_locks(pack)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return MineReport(
        pack=pack.name,
        snapshot=at,
        commits=verdicts,
        funnel=MineFunnel.of(verdicts),
        calibration_reused=tally.reused,
        calibration_afresh=tally.afresh,
    )


def _prune_locks(pack: Pack) -> None:
    """Remove the generated locks of bases that no task of the pack starts from: a commit measured
    at its parent whose task was then not kept."""
    locks = sorted((pack.root / BASES_DIR).glob(f"*.{GENERATED_LOCK}"))
    if not locks:
        return  # most packs: no base is written out just to find that out
    needed = {lock_path(pack.at(materialize(pack.root, tree))) for tree in _bases(pack)}
    for lock in locks:
        if lock not in needed:
            lock.unlink()


def _skipped(commit: Commit, verdict: MineVerdict, reason: str, trace: Trace) -> MinedCommit:
    return MinedCommit(
        commit=commit.sha,
        subject=commit.subject,
        verdict=verdict,
        reason=reason,
        stage=trace.stage,
        base=trace.base,
    )
