"""Shared fixtures: fresh copies of the taskapp fixture and a runner for its gate."""

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from builtin_pack import FIXTURE_DIR

from rig.packs.tasks import load_tasks
from rig.paths import REPO_ROOT
from rig.schema import Task
from rig.workspace.build import apply_patch, copy_fixture

# Every project environment the tests build (the built-in pack's among them, which every run of it
# uses) installs offline from build/wheels, which `make setup-dev` fills: the tests run without a
# network. Set here, before any test starts a rig, so that every rig a test starts inherits it; the
# cache is shared by the workers (a file lock builds each environment once) and kept between runs.
os.environ.update(
    {
        "RIG_ENV_DIR": str(REPO_ROOT / "build" / "test-envs"),
        "RIG_WHEELS": str(REPO_ROOT / "build" / "wheels"),
        "UV_OFFLINE": "1",
        "UV_CACHE_DIR": str(REPO_ROOT / "build" / "uv-cache"),
        # The harness CLIs are the checkout's (`make setup`): a rig a test starts never installs one
        # on first use, even from a terminal (harnesses.cli.installs_on_first_use).
        "RIG_INSTALL_HARNESSES": "0",
    }
)

# The files that take longest, longest first (measured in CI's log, `--durations`): pytest-xdist's
# loadfile hands whole files to whichever worker is free, in collection order when told
# `--no-loadscope-reorder` (the Makefile does; by default it orders files by their number of tests,
# which put test_demo, one test of two minutes, last: one worker busy while the other idled).
# Every other file follows in its usual order.
SLOW_FIRST = (
    "test_conformance.py",
    "test_demo.py",
    "test_faults.py",
    "test_confinement.py",
    "test_run_pipeline.py",
    "test_sealed.py",
    "test_calibrate.py",
    "test_wheel.py",
    "test_runner_vitest.py",
    "test_harness_versions.py",
    "test_tool_gate.py",
    "test_keys_outside.py",
    "test_sequential_run.py",
    "test_pack_notes_js.py",
    "test_aa.py",
    "test_mine.py",
    "test_preflight.py",
    "test_runner_jest.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put the slowest files first (SLOW_FIRST), keeping the order of tests within each file."""
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


# The task the harness tests run: a small bug fix whose baseline fails check.py.
HARNESS_TASK = "t1_fix_pagination"


@pytest.fixture(scope="session", autouse=True)
def calibration_pins(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Calibrations the tests run keep their pins here, never in the user's cache: a test calibrating
    a pack under edit must not make the user's next `rig run` of it refused, nor theirs a test's."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RIG_CALIBRATION_DIR", str(tmp_path_factory.mktemp("calibration-pins")))
        yield


@pytest.fixture(scope="session")
def calibrated_task(calibration_pins: None) -> str:
    """HARNESS_TASK of the built-in pack, calibrated (`rig calibrate`) into this session's pins: a
    test whose `rig run` must print nothing but its own error gets no "never calibrated" warning,
    whichever tests (and whichever pytest-xdist worker) ran before it."""
    rig = Path(sys.executable).with_name("rig")
    proc = subprocess.run(
        [rig, "calibrate", "--task", HARNESS_TASK], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return HARNESS_TASK


@pytest.fixture
def taskapp(tmp_path: Path) -> Path:
    """A fresh, cache-free copy of fixtures/taskapp that a test may change freely."""
    return copy_fixture(FIXTURE_DIR, tmp_path / "taskapp")


@pytest.fixture(scope="module")
def task() -> Task:
    """The task the harness tests run."""
    return load_tasks(only=[HARNESS_TASK])[0]


@pytest.fixture
def workspace(taskapp: Path, task: Task) -> Path:
    """A fixture copy in the task's setup state, as the pipeline would prepare it."""
    apply_patch(taskapp, task.setup_patch)
    return taskapp


def run_check_json(workdir: Path) -> tuple[int, dict]:
    """Run the copy's scripts/check.py --json; return (exit code, parsed report)."""
    proc = subprocess.run(
        [sys.executable, "scripts/check.py", "--json"],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, f"--json must print exactly one line, got: {proc.stdout!r} {proc.stderr!r}"
    return proc.returncode, json.loads(lines[0])


@pytest.fixture
def offline_npm(monkeypatch: pytest.MonkeyPatch) -> None:
    """npm and yarn install from their caches alone (the tests' network is loopback): for node
    environments built in the test's own process."""
    monkeypatch.setenv("npm_config_offline", "true")
    monkeypatch.setenv("YARN_ENABLE_OFFLINE_MODE", "1")
