"""The node-test runner kind against the code it runs: notes-js workspaces whose task is unsolved,
with the attacks of tests/redteam_strategies.py planted in the application code the hidden tests
import, verified by rig.verify.checks without the runner around it.

Each hidden file runs in its own node process, behind a wrapper the rig writes: a canary before the
file is imported and one after, and node:assert, node:assert/strict and node:test frozen first.
"""

from pathlib import Path

import pytest
from redteam_strategies import (
    EXIT_AT_IMPORT_JS,
    FLIP_FRAMES,
    JS_IMPORTS,
    NEUTER_ASSERTIONS,
    NOTES_JS,
    PAGINATION_JS,
    SHADOW_PACKAGE_JSON,
    TARGETS,
    TASK,
)

from rig.confine.untrusted import copy_tree
from rig.packs.manifest import load_pack
from rig.packs.tasks import load_tasks
from rig.schema import HiddenOutcome, Task
from rig.verify.checks import CANARY_MARKER, run_hidden
from rig.workspace.build import apply_patch, copy_fixture
from rig.workspace.protect import compare, rules_for, snapshot

BASELINE = list(TARGETS[NOTES_JS].hidden)
# The same replacement without a try: in the wrapper's process, assigning to a frozen property throws.
NEUTER_PLAIN = NEUTER_ASSERTIONS.replace(
    "    try {\n      target[name] = () => true;\n    } catch {\n      // read-only here\n    }\n",
    "    target[name] = () => true;\n",
)


@pytest.fixture(scope="module")
def notes_task() -> Task:
    return load_tasks(load_pack(TARGETS[NOTES_JS].folder), [TASK])[0]


@pytest.fixture
def notes_workspace(tmp_path: Path, notes_task: Task) -> Path:
    """A notes-js fixture copy in the task's setup state."""
    workdir = copy_fixture(notes_task.pack.fixture_dir, tmp_path / "notes")
    apply_patch(workdir, notes_task.setup_patch)
    return workdir


def plant(workdir: Path, code: str) -> None:
    """Put `code` into pagination.mjs right after its imports, as the strategies do."""
    path = workdir / PAGINATION_JS
    text = path.read_text()
    assert JS_IMPORTS in text
    path.write_text(text.replace(JS_IMPORTS, JS_IMPORTS + code, 1))


def hidden(workdir: Path, task: Task, tmp_path: Path) -> HiddenOutcome:
    return run_hidden(workdir, task.hidden_dir, tmp_path / "j.xml", tmp_path / "home", task.pack.spec.runner)


def test_the_solution_passes_behind_the_wrapper(notes_workspace, notes_task, tmp_path):
    """Freezing the shared modules changes nothing for honest tests."""
    apply_patch(notes_workspace, notes_task.solution_patch)
    outcome = hidden(notes_workspace, notes_task, tmp_path)
    assert outcome.ok and outcome.collected == len(BASELINE) and outcome.failed == []


def test_assertions_replaced_at_import_still_fail_the_hidden_tests(notes_workspace, notes_task, tmp_path):
    """Before the freeze every assertion passed and the canaries, which throw by themselves, failed
    as they must: the unfixed task passed. Now the replacement does nothing there."""
    plant(notes_workspace, NEUTER_ASSERTIONS)
    outcome = hidden(notes_workspace, notes_task, tmp_path)
    assert not outcome.ok and outcome.failed == BASELINE and outcome.error is None


def test_assigning_to_a_frozen_assertion_fails_the_file(notes_workspace, notes_task, tmp_path):
    plant(notes_workspace, NEUTER_PLAIN)
    outcome = hidden(notes_workspace, notes_task, tmp_path)
    assert not outcome.ok and outcome.failed == ["pagination_hidden"]
    assert "read only" in (tmp_path / "j.xml").read_text()


def test_exiting_at_import_loses_the_last_canary(notes_workspace, notes_task, tmp_path):
    plant(notes_workspace, EXIT_AT_IMPORT_JS)
    outcome = hidden(notes_workspace, notes_task, tmp_path)
    assert not outcome.ok and outcome.failed[0] == CANARY_MARKER
    assert "is missing from the junit report" in outcome.error


def test_runner_frames_flipped_to_passes_trip_the_canary(notes_workspace, notes_task, tmp_path):
    plant(notes_workspace, FLIP_FRAMES)
    outcome = hidden(notes_workspace, notes_task, tmp_path)
    assert not outcome.ok and outcome.failed == [CANARY_MARKER]
    assert "passed instead of failing" in outcome.error


def test_a_planted_node_modules_is_recorded_though_the_copy_leaves_it_out(notes_workspace, tmp_path):
    """node_modules/ is protected wherever it appears; the rig's copy never takes it, so protection
    learns of it from the copy's left-out trees. A Python pack's venv/ is no tampering."""
    rules = rules_for(load_pack(TARGETS[NOTES_JS].folder))
    before = snapshot(notes_workspace, rules)
    (notes_workspace / "node_modules" / "notesapp").mkdir(parents=True)
    (notes_workspace / "node_modules" / "notesapp" / "package.json").write_text(SHADOW_PACKAGE_JSON)
    (notes_workspace / "src" / "node_modules").mkdir()
    (notes_workspace / ".venv").mkdir()
    stats = copy_tree(notes_workspace, tmp_path / "copy")
    assert {"node_modules", "src/node_modules", ".venv"} <= set(stats.left_out)
    assert not (tmp_path / "copy" / "node_modules").exists()
    tampering = compare(before, tmp_path / "copy", left_out=stats.left_out)
    assert tampering.added == ["node_modules", "src/node_modules"]

    taskapp = copy_fixture(load_pack().fixture_dir, tmp_path / "taskapp")
    before = snapshot(taskapp, rules_for(load_pack()))
    (taskapp / "venv" / "lib").mkdir(parents=True)
    (taskapp / "node_modules").mkdir()
    stats = copy_tree(taskapp, tmp_path / "taskapp-copy")
    assert {"venv", "node_modules"} <= set(stats.left_out)
    assert compare(before, tmp_path / "taskapp-copy", left_out=stats.left_out).added == []
