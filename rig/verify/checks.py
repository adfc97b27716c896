"""Verification by exit codes: the pack's gate and the task's hidden tests.

Both run in a scrubbed environment with a timeout and, when the agent had a sandbox, inside it
too: they run the agent's code (the gate imports it, the tests call it). Each verdict is
cross-checked against its evidence: the gate's JSON report against its exit code, the runner's
junit XML against the runner's exit code. The hidden tests run with canaries (rig.runners.junit), tests
the rig writes and that must fail, so that outcomes forced from inside the runner's process show
up as a canary that passed, vanished or was rewritten. How each runner kind starts is its
module's (rig.runners.registry).
"""

import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rig.confine.proc import Completed, run_bounded, scrubbed_env
from rig.confine.project_env import ProjectEnv
from rig.confine.sandbox import Sandbox
from rig.confine.untrusted import read_bounded, remove
from rig.runners.hidden import HIDDEN_FOLDER, Hidden, fill
from rig.runners.junit import TESTS_FAILED
from rig.runners.registry import kind_of
from rig.schema import IN_FOLDER, CheckOutcome, GateSpec, HiddenOutcome, Pack, Placement, RunnerSpec
from rig.workspace.build import copy_fixture, tree_digest
from rig.workspace.protect import real_parents

CHECK_TIMEOUT_S = 600
HIDDEN_TIMEOUT_S = 600
HIDDEN_DEST = HIDDEN_FOLDER
NO_TESTS_COLLECTED = 5
# Marks a hidden run whose canary did not fail as it must.
CANARY_MARKER = "<canary>"
# The failing stage of a gate that reports by exit code only.
GATE_STAGE = "gate"
# The failing stage of a tree whose `build` lines failed before the gate could run.
BUILD_STAGE = "build"
# What sh says of a command it cannot find.
COMMAND_NOT_FOUND = 127
# Where the hidden-test runner writes its junit report: in the verification home, which the runner
# may write inside the sandbox (the attempt folder it ends up in is hidden there). The rig copies
# it out without following a link; a bigger report is cut short, and so unreadable.
RUNNER_JUNIT = "hidden-junit.xml"
JUNIT_MAX_BYTES = 64 * 1024 * 1024


@contextmanager
def _verify_env(home: Path, pycache: Path | None) -> Iterator[dict[str, str]]:
    """The scrubbed environment, with bytecode read and written only under a prefix directory.

    PYTHONPYCACHEPREFIX makes Python ignore every __pycache__, in the workspace and in the rig's
    own site-packages alike, so a .pyc the agent planted (say, compiled from a different source
    with a matching mtime) never runs. `pycache` is a prefix shared by many verifications, out of
    every agent's reach, so the toolchain is compiled once, not in every run; None: a fresh one.
    Without plugin autoload, pytest loads only its own plugins and the ones named with -p, never
    one a package in the interpreter registers.
    """
    home.mkdir(parents=True, exist_ok=True)
    prefix = pycache or Path(tempfile.mkdtemp(prefix="pycache-", dir=home))
    env = scrubbed_env(home, {"PYTHONPYCACHEPREFIX": str(prefix), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    # Bytecode lands under the prefix only, never in the workspace: writing it is what makes it shared.
    env.pop("PYTHONDONTWRITEBYTECODE")
    try:
        yield env
    finally:
        if pycache is None:
            shutil.rmtree(prefix, ignore_errors=True)


def _confine(
    command: list[str],
    workdir: Path,
    home: Path,
    pycache: Path | None,
    sandbox: Sandbox | None,
    project_env: ProjectEnv | None = None,
) -> list[str]:
    """`command` as verification runs it: inside the agent's `sandbox`, if it had one.

    Unconfined, the agent's code would run with the rig's rights while the gate imports it: it
    could overwrite the rig's hidden tests before they are copied in, write the results, or plant
    bytecode in the shared prefix that every later verification reads. Inside, only the rig's copy
    of the workspace and the verification home are writable, the shared prefix is read-only (the
    workspace's own bytecode is then compiled in memory), and every process is dead by the time the
    command's exit is reported: none can touch the report the rig then reads. Nor can it reach any
    host, whatever the experiment's network policy: a verdict never depends on the network.
    """
    if sandbox is None:
        return command
    read_only = [pycache] if pycache else []
    read_only += project_env.visible() if project_env is not None else []
    return sandbox.wrap(
        command, workdir, writable=[workdir, home], read_only=read_only, first_process=True, own_network=True
    )


# Under the shared prefix: one empty file per interpreter, fixture and gate already warmed.
WARM_MARKERS = "rig-warmed"
_WARMED: set[tuple[Path, Path]] = set()
_WARMING = threading.Lock()


def warm_bytecode(
    pack: Pack, pycache: Path, timeout: float = CHECK_TIMEOUT_S, project_env: ProjectEnv | None = None
) -> None:
    """Compile what `pack`'s gate imports (pytest, the stdlib) into the shared prefix, once per
    interpreter, fixture and gate.

    Sandboxed verification only reads the prefix: this run of the gate on the pristine fixture,
    which is the rig's own code, outside any sandbox, fills it so that each run does not compile the
    toolchain again. A marker in the prefix remembers it across processes (every `rig run` would
    otherwise spend a gate run on it). Only packs whose gate or hidden tests run the rig's Python
    need it.
    """
    spec = pack.spec
    if not kind_of(spec.runner.kind).python and not any("{python}" in arg for arg in spec.gate.run):
        return
    with _WARMING:
        if (pack.fixture_dir, pycache) in _WARMED:
            return
        python = project_env.python if project_env is not None else sys.executable
        key = json.dumps([python, sys.version, tree_digest(pack.fixture_dir), spec.gate.run])
        marker = pycache / WARM_MARKERS / hashlib.sha256(key.encode()).hexdigest()
        if not marker.exists():
            with tempfile.TemporaryDirectory(prefix="rig-warm-") as tmp:
                work = copy_fixture(pack.fixture_dir, Path(tmp) / "work")
                run_check(work, Path(tmp) / "home", spec.gate, timeout, pycache, project_env=project_env)
                forget_bytecode(pycache, Path(tmp))
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
        _WARMED.add((pack.fixture_dir, pycache))


def default_pycache() -> Path:
    """The shared bytecode prefix: $XDG_CACHE_HOME/rig/pycache (default ~/.cache/rig/pycache).

    Shared by every experiment and calibration of this user, so the toolchain is compiled once.
    """
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "rig" / "pycache"


def forget_bytecode(pycache: Path, root: Path) -> None:
    """Drop the shared prefix's bytecode of the files under `root` (a workspace that is gone)."""
    shutil.rmtree(pycache / root.resolve().relative_to("/"), ignore_errors=True)


def gate_command(gate: GateSpec, project_env: ProjectEnv | None) -> list[str]:
    """The gate's `run` as it starts: `{python}` is the environment's interpreter."""
    return fill(gate.run, **({"python": project_env.python} if project_env else {}))


def _run_gate(
    workdir: Path,
    home: Path,
    gate: GateSpec,
    timeout: float,
    pycache: Path | None,
    sandbox: Sandbox | None,
    project_env: ProjectEnv | None,
    more_env: dict[str, str] | None = None,
) -> Completed | CheckOutcome:
    """The gate's process as it ended (`more_env` added to its environment); the failed outcome of
    stage `build` if the environment's derived files could not be made first."""
    if project_env is not None:
        problem = derive(workdir, home, project_env, timeout, pycache, sandbox)
        if problem is not None:
            return CheckOutcome(
                exit_code=None,
                ok=False,
                failed=[BUILD_STAGE],
                results={BUILD_STAGE: [problem]},
                error=problem,
            )
    with _verify_env(home, pycache) as env:
        if project_env is not None:
            env = project_env.verify_environ(env, workdir, path_roots=True)
        env.update(more_env or {})
        confined = _confine(gate_command(gate, project_env), workdir, home, pycache, sandbox, project_env)
        return run_bounded(confined, workdir, env, timeout)


def gate_output(
    workdir: Path,
    home: Path,
    gate: GateSpec,
    project_env: ProjectEnv | None,
    timeout: float = CHECK_TIMEOUT_S,
) -> str | None:
    """What the gate printed (stdout, then stderr) when run unconfined in `workdir`, on a terminal
    1,000 columns wide (pytest cuts each failure's message to the width; `CI` would keep it whole
    but change what a project's own tests do); None if it could not start (its build lines failed)
    or timed out."""
    done = _run_gate(workdir, home, gate, timeout, None, None, project_env, {"COLUMNS": "1000"})
    if isinstance(done, CheckOutcome) or done.timed_out:
        return None
    return done.stdout + "\n" + done.stderr


def run_check(
    workdir: Path,
    home: Path,
    gate: GateSpec,
    timeout: float = CHECK_TIMEOUT_S,
    pycache: Path | None = None,
    sandbox: Sandbox | None = None,
    project_env: ProjectEnv | None = None,
) -> CheckOutcome:
    """Run the pack's gate (`gate.run`) in `workdir`; with a JSON report, cross-check it.

    `pycache`: the shared bytecode prefix (see _verify_env); None for a private one. `sandbox`: the
    agent's, which the gate runs in too (see _confine). `project_env`: the pack's environment,
    whose derived files are made first (`derive`; a failure is the gate's stage `build`), whose
    interpreter is `{python}` and whose PATH and variables the gate gets.
    """
    done = _run_gate(workdir, home, gate, timeout, pycache, sandbox, project_env)
    if isinstance(done, CheckOutcome):
        return done
    if done.timed_out:
        return CheckOutcome(
            exit_code=None, ok=False, failed=["<timeout>"], error=f"the gate timed out after {timeout:.0f}s"
        )
    if gate.report == "exit-code":
        ok = done.returncode == 0
        tail = telling_line(done.stdout + done.stderr)
        return CheckOutcome(
            exit_code=done.returncode,
            ok=ok,
            failed=[] if ok else [GATE_STAGE],
            results={} if ok else {GATE_STAGE: [tail]},
        )
    lines = done.stdout.strip().splitlines()
    try:
        report = json.loads(lines[-1])
        failed = [str(s) for s in report["failed"]]
        results = {str(k): [str(p) for p in v] for k, v in report["results"].items()}
        claimed_ok = bool(report["ok"])
    except (IndexError, ValueError, KeyError, TypeError, AttributeError):
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return CheckOutcome(
            exit_code=done.returncode,
            ok=False,
            failed=["<crash>"],
            error=f"the gate printed no JSON report (exit {done.returncode}): {tail}",
        )
    if claimed_ok != (done.returncode == 0) or claimed_ok == bool(failed):
        return CheckOutcome(
            exit_code=done.returncode,
            ok=False,
            failed=failed or ["<inconsistent>"],
            results=results,
            error=f"the gate's report ok={claimed_ok} contradicts exit {done.returncode}",
        )
    return CheckOutcome(exit_code=done.returncode, ok=claimed_ok, failed=failed, results=results)


# A line that says what failed, in a runner's output (vitest's `FAIL file`, an `Error:`, pytest's
# `1 failed`), rather than its closing decoration.
_TELLING = re.compile(r"\b(?:error|errors|fail|failed|failure|FAIL|ERR!)\b", re.IGNORECASE)


def telling_line(output: str) -> str:
    """The last line of `output` that names a failure or an error, else its last line."""
    lines = [line.strip() for line in output.strip().splitlines() if line.strip()]
    if not lines:
        return "no output"
    return next((line for line in reversed(lines) if _TELLING.search(line)), lines[-1])[:300]


def put_generated(workdir: Path, project_env: ProjectEnv) -> None:
    """Put the files the project's install generated (a version file) into `workdir`, replacing
    whatever is at their paths, links in the way included."""
    if project_env.generated is None:
        return
    for dirpath, _dirnames, filenames in os.walk(project_env.generated):
        for name in filenames:
            rel = Path(dirpath, name).relative_to(project_env.generated).as_posix()
            real_parents(workdir, rel)
            remove(workdir / rel)
            shutil.copyfile(Path(dirpath, name), workdir / rel, follow_symlinks=False)


def derive(
    workdir: Path,
    home: Path,
    project_env: ProjectEnv,
    timeout: float = CHECK_TIMEOUT_S,
    pycache: Path | None = None,
    sandbox: Sandbox | None = None,
) -> str | None:
    """Make the files a tree derives from its sources: the install's generated files (or a node
    environment's node_modules links), then the pack's `build` lines (`sh -c`, at the tree's
    root, in `sandbox` if given: they run the tree's code). None, or what failed in one line (a
    missing tool named)."""
    put_generated(workdir, project_env)
    project_env.link_modules(workdir)
    if not project_env.build:
        return None
    # One environment (and bytecode prefix) for all the lines: a later line reads what an earlier made.
    with _verify_env(home, pycache) as scrubbed:
        env = project_env.verify_environ(scrubbed, workdir, path_roots=True)
        for line in project_env.build:
            confined = _confine(["sh", "-c", line], workdir, home, pycache, sandbox, project_env)
            done = run_bounded(confined, workdir, env, timeout)
            if done.timed_out:
                return f"build line `{line}` timed out after {timeout:.0f}s"
            if done.returncode != 0:
                said = ((done.stderr + done.stdout).strip().splitlines() or ["no output"])[-1][:200]
                if done.returncode == COMMAND_NOT_FOUND:
                    return f"build line `{line}` needs a command this machine lacks ({said}); install it"
                return f"build line `{line}` exited {done.returncode}: {said}"
    return None


def place(workdir: Path, hidden_src: Path) -> tuple[Path, ...]:
    """Put every file of `hidden_src` (the pack's, mirroring the tree) at its own path in `workdir`
    (the rig's verification copy of the agent's tree), replacing whatever is there: a file, a
    link, a folder, and links or files where its parent folders go. The files put, in path order."""
    placed = []
    for source in sorted(hidden_src.rglob("*")):
        rel = source.relative_to(hidden_src)
        if not source.is_file() or source.suffix == ".pyc" or "__pycache__" in rel.parts:
            continue
        real_parents(workdir, rel.as_posix())
        target = workdir / rel
        remove(target)
        shutil.copyfile(source, target)
        placed.append(target)
    if not placed:
        raise RuntimeError(f"{hidden_src}: no hidden test files; every task needs hidden tests")
    return tuple(placed)


def place_before_gate(workdir: Path, hidden_src: Path | None, placement: Placement) -> None:
    """Hidden tests at their own paths go into the tree before the gate runs, as they will for the
    hidden run: a fix that changes what an existing test asserts is judged by the test's new
    version, never by the old one the task's setup left (which the agent may not edit where the
    pack protects the tests)."""
    if hidden_src is not None and placement.at == "own-paths":
        place(workdir, hidden_src)


def run_hidden(
    workdir: Path,
    hidden_src: Path,
    junit: Path,
    home: Path,
    runner: RunnerSpec,
    timeout: float = HIDDEN_TIMEOUT_S,
    pycache: Path | None = None,
    sandbox: Sandbox | None = None,
    project_env: ProjectEnv | None = None,
    *,
    placement: Placement = IN_FOLDER,
) -> HiddenOutcome:
    """Copy the hidden tests into the workspace, as one folder or each at its own path (`placement`),
    replacing anything there, plant the runner's canaries and run them (in `sandbox`, if given;
    with the pack's `project_env`, from it); the verdict is read from the junit report, copied to
    `junit`, and cross-checked."""
    dest = workdir / HIDDEN_DEST
    remove(dest)
    if placement.at == "own-paths":
        dest.mkdir()
        placed = place(workdir, hidden_src)
        missing = sorted(set(placement.tests) - {p.relative_to(workdir).as_posix() for p in placed})
        if missing:
            raise RuntimeError(
                f"{hidden_src}: no hidden file {', '.join(missing)}; fix hidden_tests in task.toml"
            )
        wanted = {workdir / rel for rel in placement.tests}
        hidden = Hidden(workdir, dest, tuple(p for p in placed if not wanted or p in wanted))
    else:
        shutil.copytree(hidden_src, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        hidden = Hidden(workdir, dest)
    junit.unlink(missing_ok=True)
    written = home / RUNNER_JUNIT
    # Whatever the gate's processes left at that name (a link, a FIFO, a forged report) goes first.
    remove(written)
    run = kind_of(runner.kind).setup(hidden, runner, written, project_env)
    with _verify_env(home, pycache) as env:
        if project_env is not None:
            env = project_env.verify_environ(env, workdir, path_roots=False)
        confined = _confine(run.command, workdir, home, pycache, sandbox, project_env)
        done = run_bounded(confined, workdir, env, timeout)
    if done.timed_out:
        return HiddenOutcome(
            exit_code=None,
            ok=False,
            failed=["<timeout>"],
            error=f"hidden tests timed out after {timeout:.0f}s",
        )
    report = read_bounded(written, JUNIT_MAX_BYTES)
    if report is None:
        tail = ((done.stdout + done.stderr).strip().splitlines() or ["no output"])[-1]
        return HiddenOutcome(
            exit_code=done.returncode,
            ok=False,
            failed=["<crash>"],
            error=f"{run.label} wrote no junit report (exit {done.returncode}): {tail}",
        )
    junit.write_bytes(report)
    try:
        cases = run.read_cases(junit)
    except (ET.ParseError, OSError, ValueError) as exc:
        # ValueError: a JSON report (jest's) that is no JSON or not the runner's.
        return HiddenOutcome(
            exit_code=done.returncode,
            ok=False,
            failed=["<crash>"],
            error=f"{run.label}'s report is unreadable (exit {done.returncode}): {exc}",
        )
    canaries = run.canaries
    hidden = [case for case in cases if canaries is None or not canaries.owns(case)]
    failed = [case.id for case in hidden if case.state == "failed"]
    skipped = [case.id for case in hidden if case.state == "skipped"]
    if canaries is not None:
        expected = run.failed_exit(cases) if run.failed_exit is not None else TESTS_FAILED
        problem = canaries.problem(cases, done.returncode, run.label, expected)
        if problem is not None:
            return HiddenOutcome(
                exit_code=done.returncode,
                ok=False,
                collected=len(hidden),
                failed=[CANARY_MARKER, *failed],
                skipped=skipped,
                error=f"the rig's canary test{problem}: "
                "test outcomes were forced or the report was rewritten",
            )
    elif (done.returncode == 0) == bool(failed):
        return HiddenOutcome(
            exit_code=done.returncode,
            ok=False,
            collected=len(hidden),
            failed=[*failed] or ["<inconsistent>"],
            skipped=skipped,
            error=f"{run.label} exited {done.returncode} but its junit report lists {len(failed)} failures",
        )
    if not hidden:
        return HiddenOutcome(
            exit_code=NO_TESTS_COLLECTED,
            ok=False,
            failed=["<no tests collected>"],
            error=f"hidden {run.label} collected no tests",
        )
    skip_error = f"{len(skipped)} of {len(hidden)} hidden tests were skipped or xfailed; a skip is a failure"
    return HiddenOutcome(
        exit_code=TESTS_FAILED if failed else 0,
        ok=not failed and not skipped,
        collected=len(hidden),
        failed=failed,
        skipped=skipped,
        error=skip_error if skipped else None,
        passed=[case.id for case in hidden if case.state == "passed"],
        problems={case.id: case.message for case in hidden if case.state == "failed"},
    )
