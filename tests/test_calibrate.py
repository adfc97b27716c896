"""`rig calibrate` end to end, through the real CLI on real fixture copies."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from builtin_pack import BUILTIN, FIXTURE_DIR, HIDDEN_TESTS_DIR, TASKS_DIR

from harnesses.registry import calibrated_names
from rig.calibrate.harness import AFTER_FINAL, FAULTS, checks_of
from rig.calibrate.oracle import Measurements, calibrate
from rig.env.activate import activate
from rig.packs.manifest import load_pack
from rig.packs.tasks import load_task, load_tasks
from rig.workspace.build import tree_digest

RIG = str(Path(sys.executable).with_name("rig"))


def rig_calibrate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([RIG, "calibrate", *args], capture_output=True, text=True, timeout=900)


def clone_tasks(tmp_path: Path, *names: str) -> tuple[Path, Path]:
    """Copies of some real tasks and their hidden tests, for a test to alter."""
    tasks, hidden = tmp_path / "tasks", tmp_path / "hidden"
    for name in names:
        shutil.copytree(TASKS_DIR / name, tasks / name)
        shutil.copytree(HIDDEN_TESTS_DIR / name, hidden / name)
    return tasks, hidden


@pytest.mark.slow
def test_full_calibration_passes_and_leaves_fixture_untouched():
    before = tree_digest(FIXTURE_DIR, skip_caches=False)
    proc = rig_calibrate("--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    kinds = [item["kind"] for item in report["items"]]
    assert kinds.count("clean") == 1
    assert kinds.count("baseline") == 6
    assert kinds.count("solution") == 6
    assert kinds.count("decoy") >= 12
    assert kinds[-1] == "fixture"
    assert report["ok"] and report["failed"] == 0
    assert all(item["passed"] for item in report["items"])
    for item in report["items"]:
        if item["kind"] in ("baseline", "decoy"):
            assert item["check_failed"] or item["hidden_failed"], item
    assert tree_digest(FIXTURE_DIR, skip_caches=False) == before


def test_human_output_has_one_line_per_item_and_a_summary():
    proc = rig_calibrate("--task", "t1_fix_pagination", "--workers", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("[PASS] clean fixture")
    assert any(
        line.startswith("[PASS] t1_fix_pagination baseline: fails as expected: check pytest")
        for line in lines
    )
    assert sum(line.startswith("[PASS]") for line in lines) == 8
    assert lines[-1].startswith("calibrate taskapp: 8/8 passed, all PASS")


def test_toothless_hidden_test_is_reported_as_fail(tmp_path):
    """A task whose hidden test cannot fail must not calibrate: its baseline passes verification."""
    tasks, hidden = clone_tasks(tmp_path, "t4_split_constant")
    shutil.move(tasks / "t4_split_constant", tasks / "t9_toothless")
    toml = tasks / "t9_toothless" / "task.toml"
    toml.write_text(toml.read_text().replace('id = "t4_split_constant"', 'id = "t9_toothless"'))
    (hidden / "t9_toothless").mkdir()
    (hidden / "t9_toothless" / "test_toothless.py").write_text("def test_anything():\n    assert True\n")
    proc = rig_calibrate("--tasks-dir", str(tasks), "--hidden-dir", str(hidden), "--json")
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    by_name = {item["name"]: item for item in report["items"]}
    baseline = by_name["t9_toothless baseline"]
    assert not baseline["passed"]
    assert "no teeth" in baseline["reason"]
    assert by_name["t9_toothless solution"]["passed"]
    assert not report["ok"]


def test_decoy_failing_elsewhere_than_declared_is_a_fail(tmp_path):
    tasks, hidden = clone_tasks(tmp_path, "t4_split_constant")
    toml = tasks / "t4_split_constant" / "task.toml"
    text = toml.read_text()
    old = 'fails_hidden = ["test_split_constant_hidden::test_old_name_is_gone_everywhere"]'
    assert old in text
    toml.write_text(
        text.replace(old, 'fails_hidden = ["test_split_constant_hidden::test_new_constant_values"]')
    )
    proc = rig_calibrate("--tasks-dir", str(tasks), "--hidden-dir", str(hidden))
    assert proc.returncode == 1
    line = next(x for x in proc.stdout.splitlines() if "decoy keep_alias" in x)
    assert line.startswith("[FAIL]")
    assert "not as task.toml says" in line
    assert "hidden tests declared but passing: test_split_constant_hidden::test_new_constant_values" in line
    assert "hidden tests failing but undeclared: test_split_constant_hidden::test_old_name" in line
    assert proc.stdout.strip().splitlines()[-1].startswith("calibrate taskapp: 7/8 passed, 1 FAIL")


def test_broken_task_toml_gives_one_line_error(tmp_path):
    tasks, hidden = clone_tasks(tmp_path, "t1_fix_pagination")
    toml = tasks / "t1_fix_pagination" / "task.toml"
    toml.write_text(toml.read_text().replace("timeout_s = 900", "timeout_s = 900\ntimeout = 5"))
    proc = rig_calibrate("--tasks-dir", str(tasks), "--hidden-dir", str(hidden))
    assert proc.returncode == 2
    assert proc.stdout == ""
    error = proc.stderr.strip()
    assert len(error.splitlines()) == 1
    assert "task.toml" in error and "timeout" in error


def test_unknown_task_is_named(tmp_path):
    proc = rig_calibrate("--task", "t0_nope")
    assert proc.returncode == 2
    assert "unknown task t0_nope" in proc.stderr
    assert "t1_fix_pagination" in proc.stderr


@pytest.mark.slow
def test_calibrate_pi_on_the_javascript_pack():
    """Every notes-js task through the real Pi CLI: the JavaScript gate and node --test hidden tests
    judge what a real CLI did (one harness: the others run the same pipeline, see the test above).
    The checks no pack changes (faults, tool hang, silence after the answer) are left out with
    --tasks-only: tests/test_conformance.py runs them."""
    notes_js = load_pack("packs/notes-js")
    proc = rig_calibrate("--harness", "pi", "--pack", "packs/notes-js", "--tasks-only", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checks = json.loads(proc.stdout)["checks"]
    tasks = sorted(path.name for path in notes_js.tasks_dir.iterdir() if path.is_dir())
    assert [c["name"] for c in checks] == [
        f"{task} {kind}" for task in tasks for kind in ("solution", "nothing")
    ]
    assert all(c["passed"] for c in checks), [c for c in checks if not c["passed"]]
    # Doing nothing fails at the JavaScript gate's stages or at the hidden tests, never elsewhere.
    stages = {*notes_js.spec.gate.stages, "hidden"}
    for check in checks:
        if check["name"].endswith("nothing"):
            assert check["reason"].removeprefix("fails as it should (at ").removesuffix(")") in stages, check


def test_tasks_only_without_a_harness_is_refused():
    proc = rig_calibrate("--tasks-only")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == "error: --tasks-only selects the checks of a harness; add --harness NAME (or all)\n"


def test_the_checks_no_pack_changes_are_the_ones_tasks_only_leaves_out():
    (task,) = load_tasks(only=["t1_fix_pagination"])
    every, tasks_only = checks_of("pi", [task]), checks_of("pi", [task], tasks_only=True)
    assert [name for name, _, _ in tasks_only] == ["t1_fix_pagination solution", "t1_fix_pagination nothing"]
    assert every[:2] == tasks_only
    assert [name for name, _, _ in every[2:]] == [*FAULTS, "tool_hang", AFTER_FINAL]


def test_unknown_harness_is_named():
    proc = rig_calibrate("--harness", "aider")
    assert proc.returncode == 2
    assert f"unknown harness 'aider'; use one of {', '.join(calibrated_names())} or all" in proc.stderr


def test_an_item_measured_with_the_same_inputs_is_judged_without_running_again(tmp_path):
    # As rig task mine does: it measures a task's states, then calibrates the task it wrote.
    tasks, hidden = clone_tasks(tmp_path, "t1_fix_pagination")
    task = load_task(tasks / "t1_fix_pagination", BUILTIN, hidden)
    measurements = Measurements()
    env = activate(task.pack)
    measured = {}
    for name, patches in (
        ("baseline", [task.setup_patch]),
        ("solution", [task.setup_patch, task.solution_patch]),
    ):
        (measured[name],) = measurements.verify(
            task.pack, patches, task.hidden_dir, tmp_path / name, project_env=env, placement=task.placement
        )
    # The solution's stored patch no longer has the measured bytes: it is verified afresh.
    solution = task.solution_patch
    solution.write_bytes(solution.read_bytes() + b"\n")
    report = calibrate(BUILTIN, [task], 2, measurements=measurements)
    assert report.ok, report
    items = {item.name: item for item in report.items}
    baseline = items["t1_fix_pagination baseline"]
    assert baseline.reused and baseline.check_failed == measured["baseline"].check.failed
    assert baseline.hidden_failed == measured["baseline"].hidden.failed
    assert not items["t1_fix_pagination solution"].reused
    decoys = [item for item in report.items if item.kind == "decoy"]
    assert decoys and not any(item.reused for item in decoys)
    assert not items["clean fixture"].reused
