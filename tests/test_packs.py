"""Task packs: manifests are validated with one-line errors, and the built-in runner kinds judge
hidden tests by their junit report and their canaries, whatever the project's language."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from builtin_pack import BUILTIN

from rig.packs.manifest import PackError, load_pack, pack_digest
from rig.packs.tasks import load_tasks
from rig.paths import REPO_ROOT
from rig.verify.checks import CANARY_MARKER, run_check, run_hidden
from rig.workspace.build import apply_patch, copy_fixture

NOTES_JS = REPO_ROOT / "packs" / "notes-js"
RIG = str(Path(sys.executable).with_name("rig"))


def test_the_shipped_packs_load() -> None:
    notes = load_pack(NOTES_JS)
    assert (BUILTIN.name, BUILTIN.spec.runner.kind) == ("taskapp", "pytest")
    assert (notes.name, notes.spec.runner.kind) == ("notes-js", "node-test")
    assert load_pack("packs/notes-js") == notes, "a relative path is the rig's repository's"
    assert load_pack(NOTES_JS / "pack.toml") == notes
    assert pack_digest(notes) != pack_digest(BUILTIN)


def _pack(tmp_path: Path, manifest: str) -> Path:
    root = tmp_path / "pack"
    for folder in ("fixture/scripts", "tasks", "hidden_tests"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    (root / "fixture" / "scripts" / "check.sh").write_text("exit 0\n")
    (root / "pack.toml").write_text(manifest)
    return root


GOOD = """name = "mine"
[gate]
command = ["sh", "scripts/check.sh"]
run = ["sh", "scripts/check.sh"]
report = "exit-code"
scripts = ["scripts/check.sh"]
[runner]
kind = "command"
command = ["sh", "run-tests.sh", "{junit}"]
"""


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda m: "colour = 1\n" + m,
            r"pack.toml: colour: Extra inputs are not permitted; fix the manifest$",
        ),
        (lambda m: m.replace('kind = "command"', 'kind = "karma"'), r"runner.kind: Input should be 'pytest'"),
        (
            lambda m: m.replace('command = ["sh", "run-tests.sh", "{junit}"]\n', ""),
            r"needs command = \[\.\.\.\]",
        ),
        (lambda m: m.replace('name = "mine"', 'name = "My Pack"'), r"name: String should match pattern"),
        (lambda m: m.replace("[gate]", "[gate"), r"not valid TOML"),
        (
            lambda m: m.replace('"scripts/check.sh"]\n[runner]', '"scripts/gone.sh"]\n[runner]'),
            r"gate.scripts",
        ),
        (
            lambda m: 'fixture = "nowhere"\n' + m,
            r"fixture = nowhere is not a folder; create it or fix the path$",
        ),
    ],
    ids=["unknown-key", "unknown-runner", "command-without-command", "bad-name", "toml", "script", "folder"],
)
def test_a_bad_manifest_is_one_line_naming_the_fix(tmp_path: Path, change, message: str) -> None:
    load_pack(_pack(tmp_path, GOOD))
    root = _pack(tmp_path, change(GOOD))
    with pytest.raises(PackError, match=message) as caught:
        load_pack(root)
    assert "\n" not in str(caught.value)


def test_calibrate_refuses_a_missing_pack_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run([RIG, "calibrate", "--pack", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'pack.toml'}: no pack manifest; "
        "give a pack folder with a pack.toml (see docs/packs.md)"
    ]


@pytest.fixture(scope="module")
def notes() -> dict:
    return {task.id: task for task in load_tasks(load_pack(NOTES_JS))}


def _workspace(tmp_path: Path, task, patch: Path | None) -> Path:
    work = copy_fixture(task.pack.fixture_dir, tmp_path / "work")
    apply_patch(work, task.setup_patch)
    if patch is not None:
        apply_patch(work, patch)
    return work


def _hidden(work: Path, task, tmp_path: Path):
    return run_hidden(work, task.hidden_dir, tmp_path / "junit.xml", tmp_path / "home", task.pack.spec.runner)


def test_node_hidden_tests_are_named_by_their_suite_and_judged_with_canaries(notes, tmp_path: Path) -> None:
    task = notes["t1_fix_pagination"]
    solved = _hidden(_workspace(tmp_path / "a", task, task.solution_patch), task, tmp_path / "a")
    assert solved.ok and solved.collected == 4 and solved.failed == [] and solved.exit_code == 0
    baseline = _hidden(_workspace(tmp_path / "b", task, None), task, tmp_path / "b")
    assert not baseline.ok and baseline.error is None
    assert sorted(baseline.failed) == sorted(task.spec.baseline.fails_hidden)
    assert all(test.startswith("pagination_hidden::") for test in baseline.failed)
    gate = run_check(_workspace(tmp_path / "c", task, None), tmp_path / "c" / "home", task.pack.spec.gate)
    assert not gate.ok and gate.failed == task.spec.baseline.fails_stages


def test_ending_the_node_test_process_at_import_is_caught_by_the_canary(notes, tmp_path: Path) -> None:
    """`process.exit(0)` in app code the hidden tests import ends their process before any of them
    fails: node reports nothing wrong for that file, but its last canary never runs."""
    task = notes["t1_fix_pagination"]
    work = _workspace(tmp_path, task, None)
    pagination = work / "src" / "utils" / "pagination.mjs"
    pagination.write_text("process.exit(0);\n" + pagination.read_text())
    outcome = _hidden(work, task, tmp_path)
    assert not outcome.ok and outcome.failed[0] == CANARY_MARKER
    assert "is missing from the junit report" in (outcome.error or "")


def test_a_node_hidden_file_that_cannot_load_fails_under_its_stem(notes, tmp_path: Path) -> None:
    task = notes["t1_fix_pagination"]
    work = _workspace(tmp_path, task, task.solution_patch)
    hidden = tmp_path / "hidden"
    shutil.copytree(task.hidden_dir, hidden)
    (hidden / "broken_hidden.test.mjs").write_text('import { nothing } from "notesapp/no-such.mjs";\n')
    outcome = run_hidden(work, hidden, tmp_path / "junit.xml", tmp_path / "home", task.pack.spec.runner)
    assert not outcome.ok and outcome.failed == ["broken_hidden"] and outcome.collected == 5


def test_a_command_runner_is_judged_by_its_junit_and_its_exit_code(tmp_path: Path) -> None:
    """A generic runner writes junit XML where the rig says; a report that contradicts the exit
    code is a failure, never a pass."""
    runner_script = (
        'printf \'<testsuite><testcase classname="suite.mod" name="works"/></testsuite>\' > "$1"\nexit "$2"\n'
    )
    root = _pack(
        tmp_path,
        GOOD.replace('["sh", "run-tests.sh", "{junit}"]', '["sh", "{tests}/run.sh", "{junit}", "0"]'),
    )
    (root / "hidden_tests" / "t").mkdir()
    (root / "hidden_tests" / "t" / "run.sh").write_text(runner_script)
    runner = load_pack(root).spec.runner
    work = tmp_path / "work"
    work.mkdir()
    passed = run_hidden(work, root / "hidden_tests" / "t", tmp_path / "j.xml", tmp_path / "home", runner)
    assert passed.ok and passed.collected == 1
    lying = runner.model_copy(update={"command": ["sh", "{tests}/run.sh", "{junit}", "1"]})
    failed = run_hidden(work, root / "hidden_tests" / "t", tmp_path / "j.xml", tmp_path / "home", lying)
    assert not failed.ok and failed.error == "sh exited 1 but its junit report lists 0 failures"


# What only a pack's manifest may name: the shipped packs' projects, gates, generators and plugins.
PACK_NAMES = ("taskapp", "check.py", "gen_models", "check.mjs", "gen-models", "notes-js", "notesapp")


def test_the_engine_names_no_pack() -> None:
    """Everything the engine knows about a project comes from its pack.toml: no source, comment or
    docstring under rig/ or harnesses/ names a shipped pack's project, gate or plugin."""
    offenders = []
    for package in ("rig", "harnesses"):
        for path in sorted((REPO_ROOT / package).rglob("*")):
            rel = path.relative_to(REPO_ROOT)
            # harnesses/node holds the installed harness CLIs (npm's), not the rig's code.
            if not path.is_file() or rel.parts[:2] == ("harnesses", "node") or "__pycache__" in rel.parts:
                continue
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                offenders += [f"{rel}:{number}: {name}" for name in PACK_NAMES if name in line]
    assert offenders == []
