"""Workspace preparation: deterministic baselines, a diff that reports every change, overlays."""

import subprocess

import pytest

from rig.paths import FIXTURE_DIR
from rig.untrusted import copy_tree
from rig.workspace import (
    WorkspaceError,
    apply_overlays,
    collect_diff,
    copy_fixture,
    init_baseline,
    quote_path,
)


def test_baseline_commit_depends_on_content_only(tmp_path):
    first = init_baseline(copy_fixture(FIXTURE_DIR, tmp_path / "a" / "work"), tmp_path / "a" / "rig.git")
    second = init_baseline(copy_fixture(FIXTURE_DIR, tmp_path / "b" / "work"), tmp_path / "b" / "rig.git")
    assert first == second and len(first) == 40
    other = copy_fixture(FIXTURE_DIR, tmp_path / "c" / "work")
    (other / "AGENTS.md").unlink()
    assert init_baseline(other, tmp_path / "c" / "rig.git") != first


def test_diff_is_taken_against_the_rigs_private_copy(taskapp, tmp_path):
    baseline = init_baseline(taskapp, tmp_path / "rig.git")
    (taskapp / "README.md").write_text("rewritten\n")
    (taskapp / "docs" / "style.md").unlink()
    (taskapp / "notes with space.txt").write_text("new\n")
    # An agent rewriting its own history must not hide its changes from the rig.
    (taskapp / ".git" / "refs" / "heads" / "main").write_text("0" * 40 + "\n")
    diff, changed = collect_diff(taskapp, tmp_path / "rig.git", baseline)
    assert changed == ["M README.md", "D docs/style.md", "A notes with space.txt"]
    assert "+rewritten" in diff and "diff --git a/docs/style.md b/docs/style.md" in diff


def test_overlays_remove_and_write_inside_the_workspace_only(taskapp):
    apply_overlays(taskapp, ["AGENTS.md"], {"notes/extra.md": "hello\n"})
    assert not (taskapp / "AGENTS.md").exists()
    assert (taskapp / "notes" / "extra.md").read_text() == "hello\n"
    with pytest.raises(WorkspaceError, match="leaves the workspace"):
        apply_overlays(taskapp, [], {"../escape.md": "x"})
    with pytest.raises(WorkspaceError, match="does not exist in the workspace"):
        apply_overlays(taskapp, ["CLAUDE.md"], {})


def test_quote_path_is_unambiguous_and_keeps_unicode_readable():
    assert quote_path(b"notes with space.txt") == "notes with space.txt"
    assert quote_path("ünïcödé/日本.md".encode()) == "ünïcödé/日本.md"
    assert quote_path(b"-rf") == "-rf"
    assert quote_path(b"new\nline\ttab") == '"new\\nline\\ttab"'
    assert quote_path(b'"quoted"') == '"\\"quoted\\""'
    assert quote_path(b"back\\slash") == '"back\\\\slash"'
    assert quote_path(b"\xff\xfe caf\xc3\xa9 \x1b") == '"\\377\\376 café \\033"'


def test_diff_reproduces_bytes_whatever_attributes_or_encodings_the_agent_wrote(taskapp, tmp_path):
    baseline = init_baseline(taskapp, tmp_path / "rig.git")
    (taskapp / ".gitattributes").write_text("* text=auto eol=lf\n*.txt diff\n")
    (taskapp / "crlf.txt").write_bytes(b"one\r\ntwo\r\n")
    (taskapp / "latin1.txt").write_bytes("café\n".encode("latin-1"))
    (taskapp / "README.md").write_bytes((taskapp / "README.md").read_bytes() + b"\xff\n")
    diff, changed = collect_diff(taskapp, tmp_path / "rig.git", baseline)
    assert changed == ["A .gitattributes", "M README.md", "A crlf.txt", "A latin1.txt"]
    assert "GIT binary patch" in diff and "+two\r\n" in diff  # latin-1 as binary, CRLF kept
    fresh = copy_fixture(FIXTURE_DIR, tmp_path / "fresh")
    (tmp_path / "d.patch").write_text(diff)
    proc = subprocess.run(
        ["git", "apply", "--whitespace=nowarn", str(tmp_path / "d.patch")], cwd=fresh, capture_output=True
    )
    assert proc.returncode == 0, proc.stderr
    for name in (".gitattributes", "crlf.txt", "latin1.txt", "README.md"):
        assert (fresh / name).read_bytes() == (taskapp / name).read_bytes(), name


def test_agent_gitignore_and_nested_repositories_hide_nothing_from_the_diff(taskapp, tmp_path):
    baseline = init_baseline(taskapp, tmp_path / "rig.git")
    (taskapp / ".gitignore").write_text("*.py\nsecret/\n")
    (taskapp / "taskapp" / "probe.py").write_text("import os\n")
    (taskapp / "secret").mkdir()
    (taskapp / "secret" / "notes.md").write_text("hidden\n")
    nested = taskapp / "vendor"
    subprocess.run(["git", "init", "-q", str(nested)], check=True)
    (nested / "lib.py").write_text("x = 1\n")
    (taskapp / "taskapp" / "__pycache__").mkdir(exist_ok=True)
    (taskapp / "taskapp" / "__pycache__" / "probe.cpython-311.pyc").write_bytes(b"\0cache")
    # The rig diffs its own copy of the workspace, which leaves every .git (the nested one too) out.
    copy = tmp_path / "copy"
    stats = copy_tree(taskapp, copy)
    assert stats.excluded[".git"] > 1 and stats.excluded["__pycache__"] >= 2
    diff, changed = collect_diff(copy, tmp_path / "rig.git", baseline)
    assert changed == ["M .gitignore", "A secret/notes.md", "A taskapp/probe.py", "A vendor/lib.py"]
    assert "+import os" in diff and "+x = 1" in diff and "probe.cpython" not in diff
