"""Verification by exit codes: the fixture's gate (check.py) and the task's hidden tests.

Both run in a scrubbed environment with a timeout. Each verdict is cross-checked against its
evidence: check.py's JSON against its exit code, pytest's junit XML against pytest's exit code.
"""

import json
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from pydantic import BaseModel, Field

from rig.proc import run_bounded, scrubbed_env

CHECK_TIMEOUT_S = 600
HIDDEN_TIMEOUT_S = 600
HIDDEN_DEST = "_hidden_tests"
NO_TESTS_COLLECTED = 5
# The rig's own pytest configuration: the workspace's pyproject, conftest.py files and
# plugins cannot change how the hidden tests are collected or reported.
HIDDEN_INI = "[pytest]\naddopts =\n"


class CheckOutcome(BaseModel):
    exit_code: int | None
    ok: bool
    failed: list[str] = Field(default_factory=list)
    results: dict[str, list[str]] = Field(default_factory=dict)
    error: str | None = None


class HiddenOutcome(BaseModel):
    exit_code: int | None
    ok: bool
    collected: int = 0
    failed: list[str] = Field(default_factory=list)
    error: str | None = None


class Verification(BaseModel):
    check: CheckOutcome
    hidden: HiddenOutcome | None

    @property
    def success(self) -> bool:
        return self.check.ok and self.hidden is not None and self.hidden.ok


def run_check(workdir: Path, home: Path, timeout: float = CHECK_TIMEOUT_S) -> CheckOutcome:
    """Run `scripts/check.py --json` with the rig's interpreter (which pins ruff and pytest)."""
    done = run_bounded([sys.executable, "scripts/check.py", "--json"], workdir, scrubbed_env(home), timeout)
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


def _junit_failures(junit: Path) -> tuple[int, list[str]]:
    """(tests run, failed or errored test ids as `module::name`) from a junit XML file."""
    root = ET.parse(junit).getroot()
    collected = 0
    failed = []
    for case in root.iter("testcase"):
        collected += 1
        if any(child.tag in ("failure", "error") for child in case):
            module = case.get("classname", "").rsplit(".", 1)[-1]
            failed.append(f"{module}::{case.get('name')}")
    return collected, failed


def run_hidden(
    workdir: Path, hidden_src: Path, junit: Path, home: Path, timeout: float = HIDDEN_TIMEOUT_S
) -> HiddenOutcome:
    """Copy the hidden tests into the workspace (replacing anything there) and run them."""
    dest = workdir / HIDDEN_DEST
    if dest.is_symlink() or dest.is_file():
        dest.unlink()
    elif dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(hidden_src, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    ini = dest / "pytest.ini"
    ini.write_text(HIDDEN_INI)
    junit.unlink(missing_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-c",
        str(ini),
        "--rootdir",
        str(dest),
        "--confcutdir",
        str(dest),
        "--import-mode=importlib",
        "-p",
        "no:cacheprovider",
        "-p",
        "taskapp_testing.plugin",
        f"--junitxml={junit}",
        "-o",
        "junit_family=xunit2",
        str(dest),
    ]
    done = run_bounded(cmd, workdir, scrubbed_env(home), timeout)
    if done.timed_out:
        return HiddenOutcome(
            exit_code=None,
            ok=False,
            failed=["<timeout>"],
            error=f"hidden tests timed out after {timeout:.0f}s",
        )
    if done.returncode == NO_TESTS_COLLECTED:
        return HiddenOutcome(
            exit_code=done.returncode,
            ok=False,
            failed=["<no tests collected>"],
            error="hidden pytest collected no tests",
        )
    if not junit.exists():
        tail = ((done.stdout + done.stderr).strip().splitlines() or ["no output"])[-1]
        return HiddenOutcome(
            exit_code=done.returncode,
            ok=False,
            failed=["<crash>"],
            error=f"pytest wrote no junit report (exit {done.returncode}): {tail}",
        )
    collected, failed = _junit_failures(junit)
    if (done.returncode == 0) == bool(failed):
        return HiddenOutcome(
            exit_code=done.returncode,
            ok=False,
            collected=collected,
            failed=failed or ["<crash>"],
            error=f"pytest exit {done.returncode} contradicts junit ({len(failed)} failed)",
        )
    return HiddenOutcome(
        exit_code=done.returncode,
        ok=done.returncode == 0 and collected > 0,
        collected=collected,
        failed=failed,
    )
