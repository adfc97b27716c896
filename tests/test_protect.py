"""Protected files: every kind of tampering is found and undone byte for byte."""

import os
import py_compile
import subprocess
import sys
from pathlib import Path

from builtin_pack import BUILTIN, FIXTURE_DIR

from rig.packs.manifest import load_pack
from rig.paths import REPO_ROOT
from rig.verify.checks import run_check
from rig.workspace.build import copy_fixture, tree_digest
from rig.workspace.protect import compare, is_protected, restore, rules_for, snapshot

RULES = rules_for(BUILTIN)
NOTES_JS = load_pack(REPO_ROOT / "packs" / "notes-js")
JS_RULES = rules_for(NOTES_JS)


def test_protected_paths():
    for rel in (
        "scripts/check.py",
        "tests/unit/test_x.py",
        "taskapp_testing/plugin.py",
        "pyproject.toml",
        "conftest.py",
        "taskapp/conftest.py",
        "deep/pytest.ini",
        "setup.cfg",
        "tox.ini",
        "sitecustomize.py",
        "lib/usercustomize.py",
        "x/evil.pth",
        # Sourceless modules: Python imports them where no .py is, an extension even before it.
        "taskapp/utils/pagination.pyc",
        "fast.pyc",
        "taskapp/fast.cpython-311-x86_64-linux-gnu.so",
        "taskapp/fast.abi3.so",
        # Modules that would shadow the stdlib or an installed one where verification looks first.
        "json.py",
        "pytest/__main__.py",
        "_pytest/runner.py",
        "ruff/__init__.py",
        "scripts/json.py",
        "scripts/subprocess.py",
    ):
        assert is_protected(rel, RULES), rel
    for rel in (
        "taskapp/app.py",
        "scripts/other.py",
        "README.md",
        "testsuite/x.py",
        "taskapp/json.py",
        "taskapp/__pycache__/app.cpython-311.pyc",
        "migrations/0003_due_date.py",
        "docs/json.md",
    ):
        assert not is_protected(rel, RULES), rel


def test_the_fixture_protects_exactly_its_gate_and_tests(taskapp):
    """No fixture file is taken for a shadowing module (which the agent could then not edit)."""
    extra = {rel for rel in snapshot(taskapp, RULES).files if rel.split("/")[0] not in RULES.dirs}
    assert extra == set(RULES.files)


def test_node_pack_protects_its_gate_tests_and_module_resolution(tmp_path):
    """The node-test kind protects how node and npm start and resolve, wherever an agent adds it;
    the app's own sources stay the agent's."""
    for rel in (
        "package.json",
        "src/package.json",
        ".npmrc",
        "src/.npmrc",
        "node_modules/notesapp/index.mjs",
        "src/node_modules/x.mjs",
        "scripts/check.mjs",
        "scripts/lib/anything.mjs",
        "test/app.test.mjs",
        "vitest.config.mjs",
        ".mocharc.json",
        "node.config.json",
    ):
        assert is_protected(rel, JS_RULES), rel
    for rel in ("src/app.mjs", "bin/notes.mjs", "docs/style.md", "conftest.py", "json.py", "x.pyc"):
        assert not is_protected(rel, JS_RULES), rel
    work = copy_fixture(NOTES_JS.fixture_dir, tmp_path / "notes")
    snap = snapshot(work, JS_RULES)
    assert "package.json" in snap.files and "scripts/check.mjs" in snap.files
    assert not any(rel.startswith("src/") for rel in snap.files)
    (work / "node_modules" / "notesapp").mkdir(parents=True)
    (work / "node_modules" / "notesapp" / "index.mjs").write_text("export default {};\n")
    (work / "package.json").write_text("{}\n")
    found = compare(snap, work)
    assert found.added == ["node_modules/notesapp/index.mjs"] and found.modified == ["package.json"]
    restore(snap, work, found)
    assert compare(snap, work).touched == [] and not (work / "node_modules").exists()


def test_tampering_is_found_and_undone(taskapp, tmp_path):
    snap = snapshot(taskapp, RULES)
    pristine = {rel: data for rel, (data, _mode) in snap.files.items()}
    (taskapp / "scripts" / "check.py").write_text("raise SystemExit(0)\n")
    (taskapp / "tests" / "unit" / "test_errors.py").unlink()
    (taskapp / "taskapp" / "conftest.py").write_text("collect_ignore_glob = ['*']\n")
    (taskapp / "patch.pth").write_text("import os\n")
    elsewhere = tmp_path / "elsewhere"
    (taskapp / "taskapp_testing").rename(elsewhere)
    (taskapp / "taskapp_testing").symlink_to(elsewhere)
    cache = taskapp / "tests" / "unit" / "__pycache__"
    cache.mkdir()
    (cache / "test_models.cpython-311.pyc").write_bytes(b"planted")

    found = compare(snap, taskapp)
    assert found.modified == ["scripts/check.py", "taskapp_testing/__init__.py", "taskapp_testing/plugin.py"]
    assert found.deleted == ["tests/unit/test_errors.py"]
    assert found.added == ["patch.pth", "taskapp/conftest.py"]

    restore(snap, taskapp, found)
    assert compare(snap, taskapp).touched == []
    assert not (taskapp / "taskapp_testing").is_symlink()
    assert {rel: (taskapp / rel).read_bytes() for rel in pristine} == pristine
    assert not cache.exists()
    assert (elsewhere / "plugin.py").exists()


def plain_python(workdir: Path, code: str) -> str:
    """stdout of `python -c code` in workdir, as a normal interpreter (no rig settings) runs it."""
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=workdir,
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"], "PYTHONDONTWRITEBYTECODE": "1"},
    )
    return proc.stdout.strip() or proc.stderr.strip()


def test_sourceless_modules_are_tampering_and_removed(workspace, tmp_path):
    """A .pyc where the source was, or an extension module, would run without any source to check."""
    snap = snapshot(workspace, RULES)
    source = workspace / "taskapp" / "utils" / "pagination.py"
    fixed = source.read_text().replace("has_next=end <= len(items)", "has_next=end < len(items)")
    forged = tmp_path / "pagination.py"
    forged.write_text(fixed + "FORGED = True\n")
    source.unlink()
    py_compile.compile(str(forged), cfile=str(source.with_suffix(".pyc")), doraise=True)
    assert plain_python(workspace, "import taskapp.utils.pagination as m; print(m.FORGED)") == "True"
    (workspace / "taskapp" / "speedups.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF")

    found = compare(snap, workspace)
    assert found.added == [
        "taskapp/speedups.cpython-311-x86_64-linux-gnu.so",
        "taskapp/utils/pagination.pyc",
    ]
    assert found.modified == [] and found.deleted == []
    restore(snap, workspace, found)
    assert not source.with_suffix(".pyc").exists()
    assert not (workspace / "taskapp" / "speedups.cpython-311-x86_64-linux-gnu.so").exists()
    assert compare(snap, workspace).touched == []


def test_restore_removes_every_bytecode_cache_without_calling_it_tampering(workspace, tmp_path):
    outside = tmp_path / "outside_cache"
    outside.mkdir()
    (outside / "app.cpython-311.pyc").write_bytes(b"elsewhere")
    snap = snapshot(workspace, RULES)
    planted = [
        workspace / "__pycache__",
        workspace / "scripts" / "__pycache__",
        workspace / "taskapp" / "utils" / "__pycache__",
        workspace / "migrations" / "__pycache__",
    ]
    for cache in planted:
        cache.mkdir()
        (cache / "x.cpython-311.pyc").write_bytes(b"planted")
    (workspace / "taskapp" / "__pycache__").symlink_to(outside, target_is_directory=True)
    (workspace / "taskapp" / "routes" / "__pycache__").write_bytes(b"a file in the way")

    found = compare(snap, workspace)
    assert found.touched == []
    restore(snap, workspace, found)
    leftovers = [p for p in workspace.rglob("*") if p.name == "__pycache__" or p.is_symlink()]
    assert leftovers == []
    assert (outside / "app.cpython-311.pyc").read_bytes() == b"elsewhere"


# A pytest planted at the root, found first by check.py's `python -m pytest` (cwd = the root).
FORGED_PYTEST = "import sys\n\nsys.exit(0)\n"
FORGED_JSON = 'import os\n\nprint(\'{"ok": true, "failed": [], "results": {}}\', flush=True)\nos._exit(0)\n'


def test_modules_shadowing_the_gates_tools_are_removed(workspace, tmp_path):
    """A root pytest/ (check.py's pytest stage) and scripts/json.py are recorded and removed."""
    snap = snapshot(workspace, RULES)
    fake = workspace / "pytest"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text(FORGED_PYTEST)
    (workspace / "scripts" / "json.py").write_text(FORGED_JSON)
    assert plain_python(workspace, "import pytest; print(pytest.__file__)") == str(fake / "__init__.py")

    found = compare(snap, workspace)
    assert found.added == ["pytest/__init__.py", "pytest/__main__.py", "scripts/json.py"]
    restore(snap, workspace, found)
    assert compare(snap, workspace).touched == []
    outcome = run_check(workspace, tmp_path / "home", BUILTIN.spec.gate)
    assert not outcome.ok and outcome.failed == ["pytest"]


def test_restore_does_not_touch_a_fixture_copy_it_did_not_change(taskapp):
    """Restoring an untouched workspace changes nothing (pristine fixture has no caches)."""
    before = tree_digest(taskapp, skip_caches=False)
    snap = snapshot(taskapp, RULES)
    restore(snap, taskapp, compare(snap, taskapp))
    assert tree_digest(taskapp, skip_caches=False) == before == tree_digest(FIXTURE_DIR)


def test_with_a_project_environment_only_standard_library_names_shadow(tmp_path: Path) -> None:
    """The project's own package may share a name with a package installed with rig (iniconfig,
    which pytest needs): in its environment it is the project's, and never shadows."""
    from env_pack import make_pack

    pack = make_pack(tmp_path / "pack")
    (pack / "fixture" / "src" / "envproject").rename(pack / "fixture" / "src" / "iniconfig")
    rules = rules_for(load_pack(pack))
    assert ("src",) in rules.shadow_roots and "iniconfig" in rules.own_names
    assert not is_protected("src/iniconfig/__init__.py", rules)
    assert is_protected("src/pytest.py", rules), "the gate puts src/ first: pytest there would win"
    assert is_protected("src/json.py", rules) and is_protected("src/json/__init__.py", rules)
    # Without an environment the rig's own installed names shadow as before.
    assert is_protected("iniconfig.py", rules_for(BUILTIN))
