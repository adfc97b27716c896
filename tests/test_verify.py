"""Verification decides by exit codes and junit evidence, on real workspaces."""

import shutil

import pytest

from rig.paths import HIDDEN_TESTS_DIR, TASKS_DIR
from rig.verify import HIDDEN_DEST, run_check, run_hidden
from rig.workspace import PatchError, apply_patch


def test_hidden_failures_come_from_junit(taskapp, tmp_path):
    apply_patch(taskapp, TASKS_DIR / "t1_fix_pagination" / "setup.patch")
    outcome = run_hidden(taskapp, HIDDEN_TESTS_DIR / "t1_fix_pagination", tmp_path / "j.xml", tmp_path)
    assert not outcome.ok and outcome.exit_code == 1
    assert outcome.collected == 4
    assert "test_pagination_hidden::test_exact_multiple_last_page" in outcome.failed


def test_no_tests_collected_is_a_failure(taskapp, tmp_path):
    empty = tmp_path / "empty_hidden"
    empty.mkdir()
    (empty / "helpers.py").write_text("VALUE = 1\n")
    outcome = run_hidden(taskapp, empty, tmp_path / "j.xml", tmp_path)
    assert not outcome.ok
    assert outcome.exit_code == 5
    assert outcome.error == "hidden pytest collected no tests"


def test_workspace_conftest_cannot_rig_the_hidden_tests(taskapp, tmp_path):
    """A conftest.py left in the workspace root or pre-placed at the destination is ignored."""
    apply_patch(taskapp, TASKS_DIR / "t1_fix_pagination" / "setup.patch")
    rigging = "import pytest\n\n@pytest.hookimpl(tryfirst=True)\ndef pytest_runtest_call(item):\n    pass\n"
    (taskapp / "conftest.py").write_text(rigging)
    (taskapp / HIDDEN_DEST).mkdir()
    (taskapp / HIDDEN_DEST / "conftest.py").write_text("collect_ignore_glob = ['*']\n")
    outcome = run_hidden(taskapp, HIDDEN_TESTS_DIR / "t1_fix_pagination", tmp_path / "j.xml", tmp_path)
    assert not outcome.ok and len(outcome.failed) == 4


def test_check_reports_failed_stages(taskapp, tmp_path):
    apply_patch(taskapp, TASKS_DIR / "t3_fix_check" / "setup.patch")
    outcome = run_check(taskapp, tmp_path)
    assert outcome.exit_code == 1 and not outcome.ok
    assert outcome.failed == ["ruff", "pytest", "raise_scan", "magic_numbers"]


def test_check_without_a_report_is_a_failure(taskapp, tmp_path):
    (taskapp / "scripts" / "check.py").write_text("import sys\nsys.exit(0)\n")
    outcome = run_check(taskapp, tmp_path)
    assert not outcome.ok
    assert outcome.error.startswith("check.py printed no JSON report (exit 0)")


def test_check_whose_report_contradicts_its_exit_code_fails(taskapp, tmp_path):
    fake = 'print(\'{"ok": true, "failed": [], "results": {}}\')\nraise SystemExit(1)\n'
    (taskapp / "scripts" / "check.py").write_text(fake)
    outcome = run_check(taskapp, tmp_path)
    assert not outcome.ok
    assert "contradicts exit 1" in outcome.error


def test_patch_that_does_not_apply_is_named(taskapp):
    shutil.rmtree(taskapp / "taskapp" / "utils")
    with pytest.raises(PatchError, match="setup.patch: does not apply"):
        apply_patch(taskapp, TASKS_DIR / "t1_fix_pagination" / "setup.patch")
