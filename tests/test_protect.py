"""Protected files: every kind of tampering is found and undone byte for byte."""

from rig.protect import compare, is_protected, restore, snapshot


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
    ):
        assert is_protected(rel), rel
    for rel in ("taskapp/app.py", "scripts/other.py", "README.md", "testsuite/x.py"):
        assert not is_protected(rel), rel


def test_tampering_is_found_and_undone(taskapp, tmp_path):
    snap = snapshot(taskapp)
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
