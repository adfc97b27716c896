"""Workspace preparation: deterministic baselines, a diff that reports every change, overlays."""

import pytest

from rig.paths import FIXTURE_DIR
from rig.workspace import WorkspaceError, apply_overlays, collect_diff, copy_fixture, init_baseline


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
