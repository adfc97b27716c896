"""The shipped tasks are complete, and broken task directories are refused with a reason."""

import shutil

import pytest
from builtin_pack import BUILTIN, TASKS_DIR

from rig.packs.manifest import load_pack
from rig.packs.tasks import TaskError, load_task, load_tasks

TASK_IDS = ["t1_fix_pagination", "t2_add_endpoint", "t3_fix_check", "t4_split_constant", "t5_migration"]
# The built-in pack's seventh task (tool policy, docs/tool-gate.md) has no notes-js counterpart.
BUILTIN_ONLY = ["t7_cleanup_tmp"]


@pytest.mark.parametrize(
    ("pack", "hidden_glob", "extra"),
    [(None, "test_*.py", BUILTIN_ONLY), ("packs/notes-js", "*.test.mjs", [])],
)
def test_five_tasks_each_with_hypothesis_prompt_and_decoys(pack, hidden_glob, extra):
    """Both shipped packs hold the same five tasks, testing the same hypotheses."""
    tasks = load_tasks(load_pack(pack))
    assert [t.id for t in tasks] == TASK_IDS + extra
    # The component each task measures ("AGENTS.md", "skill", ...), worded for each project after it.
    builtin = {t.id: t.spec.hypothesis.split(":")[0] for t in load_tasks()}
    for task in tasks:
        assert task.spec.hypothesis.split(":")[0] == builtin[task.id] and task.spec.prompt.strip()
        assert len(task.spec.decoys) >= 2
        assert task.solution_patch.stat().st_size > 0
        assert list(task.hidden_dir.glob(hidden_glob))
        expectation = task.spec.baseline
        assert expectation.fails_stages or expectation.fails_hidden


def test_migration_skill_ships_outside_the_fixture():
    skill = TASKS_DIR / "t5_migration" / "skill" / "SKILL.md"
    text = skill.read_text()
    assert text.startswith("---\nname: taskapp-migration\n")
    for step in ("gen_models.py", "migrations/INDEX", "up(record)", "down(record)", "scripts/check.py"):
        assert step in text


def _copy(tmp_path, name="t2_add_endpoint"):
    dest = tmp_path / name
    shutil.copytree(TASKS_DIR / name, dest)
    return dest


def test_decoy_without_expectation_is_refused(tmp_path):
    task_dir = _copy(tmp_path)
    (task_dir / "decoys" / "extra.patch").write_text("")
    with pytest.raises(TaskError, match=r"decoys declared .* but decoys/ holds .*extra"):
        load_task(task_dir, BUILTIN)


def test_id_must_match_directory(tmp_path):
    task_dir = _copy(tmp_path)
    moved = task_dir.rename(tmp_path / "t2_renamed")
    with pytest.raises(TaskError, match="differs from its directory name"):
        load_task(moved, BUILTIN)


def test_missing_hidden_tests_are_refused(tmp_path):
    task_dir = _copy(tmp_path)
    with pytest.raises(TaskError, match="every task needs hidden tests"):
        load_task(task_dir, BUILTIN, tmp_path / "no-hidden")


def test_bad_value_names_the_field(tmp_path):
    task_dir = _copy(tmp_path)
    toml = task_dir / "task.toml"
    toml.write_text(toml.read_text().replace("timeout_s = 900", "timeout_s = -3"))
    with pytest.raises(TaskError, match=r"task.toml: timeout_s: .*greater than 0"):
        load_task(task_dir, BUILTIN)


def test_empty_tasks_root_is_refused(tmp_path):
    with pytest.raises(TaskError, match="no task directories"):
        load_tasks(BUILTIN, tasks_root=tmp_path)
