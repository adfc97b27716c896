"""A task's allowed-file scope: changes outside its globs are listed in the record (`out_of_scope`),
counted in the report's behaviour table, and fail the run at stage `scope` when it is enforced."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from builtin_pack import BUILTIN
from pydantic import ValidationError

from rig.analysis import load_runs
from rig.calibrate.oracle import run_item
from rig.env.activate import activate
from rig.paths import REPO_ROOT
from rig.schema import Item, RunRecord, TaskSpec
from rig.store.migrate import migrate
from rig.workspace.scope import out_of_scope, patch_out_of_scope

RIG = str(REPO_ROOT / ".venv" / "bin" / "rig")
# t1's solution changes taskapp/utils/pagination.py only; t4's changes nine files of taskapp.
SCOPES = {
    "t1_fix_pagination": 'scope = ["taskapp/utils/*"]\n',
    "t4_split_constant": 'scope = ["taskapp/constants.py", "taskapp/routes/*"]\nscope_enforced = true\n',
}


def spec(**fields) -> TaskSpec:
    base = {"id": "t", "hypothesis": "h", "prompt": "p", "timeout_s": 1, "baseline": {}, "decoys": {}}
    return TaskSpec.model_validate(base | fields)


def test_changes_outside_every_glob_are_listed():
    changed = ["M taskapp/a.py", "A taskapp/sub/b.py", "D README.md", 'A "odd\\nname.py"', "M docs/x.md"]
    assert out_of_scope(changed, spec(scope=["taskapp/*", "docs/*.md"])) == [
        "D README.md",
        'A "odd\\nname.py"',
    ]
    assert out_of_scope(changed, spec(scope=["*"])) == []
    assert out_of_scope(changed, spec()) is None


def test_a_patch_outside_its_scope_is_named(tmp_path):
    t4 = BUILTIN.tasks_dir / "t4_split_constant" / "solution.patch"
    assert patch_out_of_scope(t4, spec()) is None
    assert patch_out_of_scope(t4, spec(scope=["taskapp/*"])) == []
    assert patch_out_of_scope(t4, spec(scope=["taskapp/routes/*", "taskapp/s*/*"])) == [
        "taskapp/constants.py",
        "taskapp/utils/pagination.py",
    ]
    renamed = tmp_path / "rename.patch"
    renamed.write_text(
        "diff --git a/docs/old.md b/notes/new.md\nsimilarity index 100%\nrename from docs/old.md\n"
        "rename to notes/new.md\n"
    )
    assert patch_out_of_scope(renamed, spec(scope=["docs/*"])) == ["notes/new.md"]


def test_an_enforced_scope_needs_globs():
    with pytest.raises(ValidationError, match="scope_enforced = true needs scope"):
        spec(scope_enforced=True)
    assert spec(scope=["src/*"], scope_enforced=True).scope_enforced


def test_older_records_migrate_to_no_scope():
    record = json.loads(
        (REPO_ROOT / "tests/data/results_small/results_small/runs.jsonl").read_text().splitlines()[0]
    )
    migrated = migrate(record)
    assert migrated["out_of_scope"] is None
    RunRecord.model_validate(migrated)


@pytest.fixture(scope="module")
def scoped(tmp_path_factory) -> Path:
    """The results folder of one run each of t1 (scope kept) and t4 (enforced scope left), through
    the scripted harness replaying each reference solution, on a copy of the built-in pack."""
    root = tmp_path_factory.mktemp("scope")
    pack = root / "pack"
    shutil.copy(REPO_ROOT / "pack.toml", pack.mkdir() or pack / "pack.toml")
    shutil.copytree(BUILTIN.fixture_dir, pack / "fixtures" / "taskapp")
    for task, scope in SCOPES.items():
        shutil.copytree(BUILTIN.tasks_dir / task, pack / "tasks" / task)
        shutil.copytree(BUILTIN.hidden_dir / task, pack / "hidden_tests" / task)
        toml = pack / "tasks" / task / "task.toml"
        # Top-level keys go before the file's first table.
        toml.write_text(scope + toml.read_text())
    config = root / "scoped.toml"
    config.write_text(
        f'harness = "scripted"\npack = "{pack}"\ntasks = {json.dumps(list(SCOPES))}\n'
        "[timeouts]\nagent_s = 60\nstall_s = 30\n"
        '[[conditions]]\nname = "sol"\nharness_options = { policy = "solution" }\n'
    )
    env = {**os.environ, "RIG_RESULTS_ROOT": str(root / "results"), "RIG_RUNS_ROOT": str(root / "runs")}
    proc = subprocess.run([RIG, "run", str(config)], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    report = subprocess.run(
        [RIG, "report", str(config), "--out", str(root / "report")],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert report.returncode == 0, report.stderr
    return root


@pytest.mark.slow
def test_calibration_fails_a_solution_outside_its_own_scope(scoped):
    from rig.packs.manifest import load_pack
    from rig.packs.tasks import load_tasks

    pack = load_pack(scoped / "pack")
    (task,) = load_tasks(pack, ["t4_split_constant"])
    item = Item(
        name="t4 solution", kind="solution", task=task, patches=[task.setup_patch, task.solution_patch]
    )
    result = run_item(item, pack, scoped / "calibrate", activate(pack))
    assert not result.passed
    assert result.reason.startswith("reference solution changes files outside the task's scope: ")
    assert "taskapp/utils/pagination.py" in result.reason and result.reason.endswith(
        "widen scope in task.toml"
    )


def records(root: Path) -> dict[str, dict]:
    lines = (root / "results" / "scoped" / "runs.jsonl").read_text().splitlines()
    return {r["task"]: r for r in map(json.loads, lines)}


@pytest.mark.slow
def test_a_change_outside_an_enforced_scope_fails_at_stage_scope(scoped):
    runs = records(scoped)
    kept, left = runs["t1_fix_pagination"], runs["t4_split_constant"]
    assert kept["success"] and kept["out_of_scope"] == [] and kept["failing_stage"] is None
    # t4's solution passes the gate and the hidden tests, but changes files its scope leaves out.
    assert left["check"]["ok"] and left["hidden"]["ok"]
    assert not left["success"] and left["failing_stage"] == "scope"
    assert left["out_of_scope"] == [
        "M taskapp/schemas/common.py",
        "M taskapp/services/project_service.py",
        "M taskapp/services/search_service.py",
        "M taskapp/services/task_service.py",
        "M taskapp/utils/pagination.py",
    ]
    assert set(left["out_of_scope"]) < set(left["files_changed"])


@pytest.mark.slow
def test_the_report_counts_runs_outside_their_scope(scoped):
    df = load_runs(scoped / "results" / "scoped")
    assert dict(zip(df["task"], df["out_of_scope"], strict=True)) == {
        "t1_fix_pagination": 0,
        "t4_split_constant": 5,
    }
    report = (scoped / "report" / "report.md").read_text()
    header = next(line for line in report.splitlines() if "changed files outside the task's scope" in line)
    row = next(
        line
        for line in report.splitlines()
        if line.startswith("| `sol`") and line.count("|") == header.count("|")
    )
    cells = dict(zip(header.split("|"), row.split("|"), strict=True))
    assert cells[" changed files outside the task's scope "].strip() == "50% (1/2)"
