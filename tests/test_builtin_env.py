"""The built-in pack's gate tools (ruff and pytest, pinned in its fixture's dependency group `gate`)
come from its own [environment], never from the rig's interpreter: a copy of the pack whose group
lacks ruff fails its gate's ruff stage, though the interpreter running these tests has ruff.
Offline: the environment installs from build/wheels (make setup-dev)."""

import shutil
from pathlib import Path

from builtin_pack import BUILTIN
from env_pack import offline, rig

TASK = "t1_fix_pagination"


def test_the_gate_runs_the_environments_tools_not_the_rigs(tmp_path: Path) -> None:
    pack = tmp_path / "pack"
    shutil.copytree(BUILTIN.fixture_dir, pack / "fixtures" / "taskapp")
    shutil.copytree(BUILTIN.tasks_dir / TASK, pack / "tasks" / TASK)
    shutil.copytree(BUILTIN.hidden_dir / TASK, pack / "hidden_tests" / TASK)
    shutil.copy(BUILTIN.root / "pack.toml", pack / "pack.toml")
    pyproject = pack / "fixtures" / "taskapp" / "pyproject.toml"
    pinned = 'gate = ["ruff==0.17.6", "pytest==9.2.0"]'
    assert pinned in pyproject.read_text()
    pyproject.write_text(pyproject.read_text().replace(pinned, 'gate = ["pytest==9.2.0"]'))
    env = offline(tmp_path / "envs")

    proc = rig(env, "calibrate", "--pack", str(pack), "--task", TASK)

    assert proc.returncode == 1, proc.stdout + proc.stderr
    lock = (pack / "environment.lock.txt").read_text()
    assert "pytest==9.2.0" in lock and "ruff" not in lock, "resolved anew from the changed group"
    lines = {line.partition(":")[0]: line for line in proc.stdout.splitlines()}
    assert lines["[FAIL] clean fixture"].endswith("fails the gate: check ruff"), proc.stdout
    # pytest, which the environment has, passes: the solution fails at ruff alone.
    assert lines["[FAIL] t1_fix_pagination solution"].endswith("fails: check ruff"), proc.stdout


def test_a_harness_calibration_whose_environment_cannot_build_says_so_in_one_line(tmp_path: Path) -> None:
    # No wheels to install from, offline: the built-in environment cannot build.
    (tmp_path / "no-wheels").mkdir()
    env = offline(tmp_path / "envs", RIG_WHEELS=str(tmp_path / "no-wheels"))

    proc = rig(env, "calibrate", "--harness", "pi", "--task", TASK)

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, proc.stderr
    assert proc.stdout == "", "no check ran"
