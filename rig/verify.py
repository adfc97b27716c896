"""Verification by exit codes: the fixture's gate (check.py) and the task's hidden tests.

Both run in a scrubbed environment with a timeout. Each verdict is cross-checked against its
evidence: check.py's JSON against its exit code, pytest's junit XML against pytest's exit code.
The hidden tests run with a canary, a test the rig writes and that must fail, so that outcomes
forced from inside pytest's process show up as a canary that passed, vanished or was rewritten.
"""

import json
import os
import secrets
import shutil
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rig.models import CheckOutcome, HiddenOutcome
from rig.proc import run_bounded, scrubbed_env
from rig.untrusted import remove

CHECK_TIMEOUT_S = 600
HIDDEN_TIMEOUT_S = 600
HIDDEN_DEST = "_hidden_tests"
NO_TESTS_COLLECTED = 5
TESTS_FAILED = 1
# The rig's own pytest configuration: the workspace's pyproject, conftest.py files and
# plugins cannot change how the hidden tests are collected or reported.
HIDDEN_INI = "[pytest]\naddopts =\n"
# How the hidden tests' pytest starts, instead of `python -m pytest` (which puts the workspace
# first on sys.path, where a planted pytest/, _pytest/ or json.py would shadow the real one):
# with -P nothing is prepended, pytest is imported from the rig's environment, and the workspace
# is appended last, so only names nothing else provides (taskapp, taskapp_testing) resolve to it.
HIDDEN_BOOT = "import os, sys\nimport pytest\nsys.path.append(os.getcwd())\nraise SystemExit(pytest.main())\n"
# Marks a hidden run whose canary did not fail as it must.
CANARY_MARKER = "<canary>"
# pytest collects a directory's entries in name order. Three canaries: one collected first, one
# last (a run cut short, by pytest.exit() from application code or a forced stop, never reaches
# it) and one at a random place among the hidden tests, so that code forcing outcomes cannot
# spare them by position.
CANARY_FIRST, CANARY_LAST = "test_00", "test_zz"
_MIDDLE_LETTERS = "abcdefghijklmnopqrstuvwxy"
CANARY_SOURCE = '''"""Written by the rig: this test must fail. A pass means test outcomes were forced."""


def {test}():
    raise AssertionError("{message}")
'''


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


def default_pycache() -> Path:
    """The shared bytecode prefix: $XDG_CACHE_HOME/rig/pycache (default ~/.cache/rig/pycache).

    Shared by every experiment and calibration of this user, so the toolchain is compiled once.
    """
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "rig" / "pycache"


def forget_bytecode(pycache: Path, root: Path) -> None:
    """Drop the shared prefix's bytecode of the files under `root` (a workspace that is gone)."""
    shutil.rmtree(pycache / root.resolve().relative_to("/"), ignore_errors=True)


def run_check(
    workdir: Path, home: Path, timeout: float = CHECK_TIMEOUT_S, pycache: Path | None = None
) -> CheckOutcome:
    """Run `scripts/check.py --json` with the rig's interpreter (which pins ruff and pytest).

    `pycache`: the shared bytecode prefix (see _verify_env); None for a private one.
    """
    # -P: scripts/ is not put first on sys.path, so a planted scripts/json.py cannot shadow the
    # stdlib modules check.py imports.
    with _verify_env(home, pycache) as env:
        done = run_bounded([sys.executable, "-P", "scripts/check.py", "--json"], workdir, env, timeout)
    if done.timed_out:
        return CheckOutcome(
            exit_code=None, ok=False, failed=["<timeout>"], error=f"check.py timed out after {timeout:.0f}s"
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
            error=f"check.py printed no JSON report (exit {done.returncode}): {tail}",
        )
    if claimed_ok != (done.returncode == 0) or claimed_ok == bool(failed):
        return CheckOutcome(
            exit_code=done.returncode,
            ok=False,
            failed=failed or ["<inconsistent>"],
            results=results,
            error=f"check.py report ok={claimed_ok} contradicts exit {done.returncode}",
        )
    return CheckOutcome(exit_code=done.returncode, ok=claimed_ok, failed=failed, results=results)


@dataclass(frozen=True)
class _Case:
    """One junit testcase: its module, its name, passed/failed/skipped and its failure text."""

    module: str
    name: str
    state: str
    message: str

    @property
    def id(self) -> str:
        """`module::name`; a module's own collection report (a skip, an error) is just its name."""
        return f"{self.module}::{self.name}" if self.module else self.name


def _junit_cases(junit: Path) -> list[_Case]:
    """Every testcase of a junit XML file; failures and errors are `failed`, xfails `skipped`."""
    cases = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        tags = {child.tag for child in case}
        state = "failed" if tags & {"failure", "error"} else "skipped" if "skipped" in tags else "passed"
        problems = [child for child in case if child.tag in ("failure", "error")]
        message = " ".join(f"{child.get('message', '')} {child.text or ''}" for child in problems)
        module = case.get("classname", "").rsplit(".", 1)[-1]
        cases.append(_Case(module, case.get("name", ""), state, message))
    return cases


@dataclass(frozen=True)
class _Canary:
    """One of the rig's failing tests; every name is random so code cannot target it by name."""

    module: str
    test: str
    message: str

    def owns(self, case: _Case) -> bool:
        """Whether a junit testcase is this canary (its test, or its module's collection report)."""
        return self.module in (case.module, case.name) or case.name == self.test

    def problem(self, cases: list[_Case]) -> str | None:
        """What is wrong with this canary's outcome, or None if it failed as it must."""
        mine = [case for case in cases if self.owns(case)]
        if not mine:
            return "is missing from the junit report"
        if len(mine) > 1:
            return f"appears {len(mine)} times in the junit report"
        if mine[0].state != "failed":
            return f"{mine[0].state} instead of failing"
        if self.message not in mine[0].message:
            return "failed without its own failure message"
        return None


@dataclass(frozen=True)
class _Canaries:
    """The canaries of one hidden run."""

    members: tuple[_Canary, ...]

    def owns(self, case: _Case) -> bool:
        """Whether a junit testcase belongs to one of the canaries."""
        return any(c.owns(case) for c in self.members)

    def problem(self, cases: list[_Case], returncode: int | None) -> str | None:
        """What is wrong with the canaries' outcomes, to follow "the rig's canary test"; None if none.

        " <module> passed instead of failing" for one canary, "s failed but pytest exited 0, not 1".
        """
        for canary in self.members:
            problem = canary.problem(cases)
            if problem:
                return f" {canary.module} {problem}"
        if returncode != TESTS_FAILED:
            return f"s failed but pytest exited {returncode}, not {TESTS_FAILED}"
        return None


def _plant_canaries(dest: Path) -> _Canaries:
    """Write the canary modules into the copied hidden tests: first, last and somewhere between."""
    middle = "".join(secrets.choice(_MIDDLE_LETTERS) for _ in range(12))
    members = tuple(
        _Canary(module=module, test=f"test_{secrets.token_hex(8)}", message=secrets.token_hex(16))
        for module in (
            f"{CANARY_FIRST}{secrets.token_hex(8)}",
            f"test_{middle}",
            f"{CANARY_LAST}{secrets.token_hex(8)}",
        )
    )
    first, last = f"{members[0].module}.py", f"{members[-1].module}.py"
    outside = sorted(
        e.name for e in dest.iterdir() if e.name.startswith("test_") and not first < e.name < last
    )
    if outside:
        raise RuntimeError(f"hidden test entries {outside} sort outside the canaries; rename them")
    for canary in members:
        (dest / f"{canary.module}.py").write_text(
            CANARY_SOURCE.format(test=canary.test, message=canary.message)
        )
    return _Canaries(members)


def run_hidden(
    workdir: Path,
    hidden_src: Path,
    junit: Path,
    home: Path,
    timeout: float = HIDDEN_TIMEOUT_S,
    pycache: Path | None = None,
) -> HiddenOutcome:
    """Copy the hidden tests and the canary into the workspace (replacing anything there), run them."""
    dest = workdir / HIDDEN_DEST
    remove(dest)
    shutil.copytree(hidden_src, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    canary = _plant_canaries(dest)
    ini = dest / "pytest.ini"
    ini.write_text(HIDDEN_INI)
    junit.unlink(missing_ok=True)
    cmd = [
        sys.executable,
        "-P",
        "-c",
        HIDDEN_BOOT,
        "-q",
        "-c",
        str(ini),
        "--rootdir",
        str(dest),
        "--confcutdir",
        str(dest),
        "--import-mode=importlib",
        # A hidden module that fails to import must not stop the canary from running.
        "--continue-on-collection-errors",
        "-p",
        "no:cacheprovider",
        "-p",
        "taskapp_testing.plugin",
        f"--junitxml={junit}",
        "-o",
        "junit_family=xunit2",
        str(dest),
    ]
    with _verify_env(home, pycache) as env:
        done = run_bounded(cmd, workdir, env, timeout)
    if done.timed_out:
        return HiddenOutcome(
            exit_code=None,
            ok=False,
            failed=["<timeout>"],
            error=f"hidden tests timed out after {timeout:.0f}s",
        )
    if not junit.exists():
        tail = ((done.stdout + done.stderr).strip().splitlines() or ["no output"])[-1]
        return HiddenOutcome(
            exit_code=done.returncode,
            ok=False,
            failed=["<crash>"],
            error=f"pytest wrote no junit report (exit {done.returncode}): {tail}",
        )
    try:
        cases = _junit_cases(junit)
    except (ET.ParseError, OSError) as exc:
        return HiddenOutcome(
            exit_code=done.returncode,
            ok=False,
            failed=["<crash>"],
            error=f"pytest's junit report is unreadable (exit {done.returncode}): {exc}",
        )
    hidden = [case for case in cases if not canary.owns(case)]
    failed = [case.id for case in hidden if case.state == "failed"]
    skipped = [case.id for case in hidden if case.state == "skipped"]
    problem = canary.problem(cases, done.returncode)
    if problem is not None:
        return HiddenOutcome(
            exit_code=done.returncode,
            ok=False,
            collected=len(hidden),
            failed=[CANARY_MARKER, *failed],
            skipped=skipped,
            error=f"the rig's canary test{problem}: test outcomes were forced or the report was rewritten",
        )
    if not hidden:
        return HiddenOutcome(
            exit_code=NO_TESTS_COLLECTED,
            ok=False,
            failed=["<no tests collected>"],
            error="hidden pytest collected no tests",
        )
    skip_error = f"{len(skipped)} of {len(hidden)} hidden tests were skipped or xfailed; a skip is a failure"
    return HiddenOutcome(
        exit_code=TESTS_FAILED if failed else 0,
        ok=not failed and not skipped,
        collected=len(hidden),
        failed=failed,
        skipped=skipped,
        error=skip_error if skipped else None,
    )
