"""Workspace preparation: deterministic baselines, a diff that reports every change, overlays."""

import os
import subprocess

import pytest
from builtin_pack import FIXTURE_DIR

from rig.confine.untrusted import copy_tree, walk
from rig.workspace.build import (
    DIFF_MAX_FILE_BYTES,
    Stager,
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


def test_one_pass_copy_and_staging_gives_the_diff_a_walk_of_the_copy_gives(taskapp, tmp_path):
    """The runner stages while it copies (each file read once); the diff is the same as staging
    the finished copy by walking it, for links, modes, caches and a file too large to store."""
    baseline = init_baseline(taskapp, tmp_path / "a.git")
    subprocess.run(["cp", "-a", str(tmp_path / "a.git"), str(tmp_path / "b.git")], check=True)
    (taskapp / "README.md").write_text("rewritten\n")
    (taskapp / "docs" / "style.md").unlink()
    (taskapp / "run.sh").write_text("#!/bin/sh\n")
    (taskapp / "run.sh").chmod(0o755)
    os.symlink("README.md", taskapp / "readme-link")
    (taskapp / "stray.pyc").write_bytes(b"\0bytecode")
    (taskapp / "odd.pyc").mkdir()
    (taskapp / "odd.pyc" / "inside.txt").write_text("under a cache name\n")
    with open(taskapp / "big.bin", "wb") as big:
        big.truncate(DIFF_MAX_FILE_BYTES + 1)

    with Stager(tmp_path / "copy", tmp_path / "a.git") as stager:
        copy_tree(taskapp, tmp_path / "copy", sink=stager)
        stager.finish()
    one_pass = collect_diff(tmp_path / "copy", tmp_path / "a.git", baseline, staged=True)
    walked = collect_diff(tmp_path / "copy", tmp_path / "b.git", baseline)

    assert one_pass == walked
    diff, changed = one_pass
    assert changed == [
        "M README.md",
        "A big.bin",
        "D docs/style.md",
        "A readme-link",
        "A run.sh",
    ]
    assert f"+rig: not stored, {DIFF_MAX_FILE_BYTES + 1} bytes" in diff
    assert "new file mode 100755" in diff and "new file mode 120000" in diff
    # Every file and link handed over, staged or not: what protection checks for added files.
    in_copy = [rel for rel, _st in walk(tmp_path / "copy", skip=())]
    assert sorted(stager.paths) == sorted(in_copy) and {"stray.pyc", "odd.pyc/inside.txt"} <= set(in_copy)
    assert os.path.getsize(tmp_path / "copy" / "big.bin") == DIFF_MAX_FILE_BYTES + 1


def test_a_failing_stager_loses_the_diff_but_never_the_copy(taskapp, tmp_path):
    """verification still needs the whole copy when git cannot stage it."""
    (tmp_path / "not-a-repository").mkdir()
    with Stager(tmp_path / "copy", tmp_path / "not-a-repository") as stager:
        copy_tree(taskapp, tmp_path / "copy", sink=stager)
        with pytest.raises(WorkspaceError, match="git fast-import failed"):
            stager.finish()
    copied = sorted(rel for rel, _st in walk(tmp_path / "copy", skip=()))
    assert copied == sorted(rel for rel, _st in walk(taskapp)) and len(copied) > 50
    assert (tmp_path / "copy" / "README.md").read_bytes() == (taskapp / "README.md").read_bytes()


def test_a_stager_left_unfinished_stops_quietly(tmp_path):
    """A copy stopped at a limit leaves the stager unfinished: its git is killed, nothing raised."""
    subprocess.run(["git", "init", "-q", "--bare", str(tmp_path / "rig.git")], check=True)
    with Stager(tmp_path / "copy", tmp_path / "rig.git") as stager:
        stager.file("a.txt", 0o644, b"x" * 100, 100)
    assert stager.paths == ["a.txt"]
    assert not list((tmp_path / "rig.git" / "objects" / "pack").glob("*.pack"))
