"""A task's base: kept from a real git work copy, carried in the pack's bundle, written out once per
machine from it, byte for byte, pinned by its git tree hash."""

import os
import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from mine_repos import git

from rig.packs.manifest import load_pack
from rig.packs.tasks import TaskError, load_tasks
from rig.workspace.bases import BASES_DIR_VAR, bundle, bundle_path, keep, materialize
from rig.workspace.build import WorkspaceError, tree_digest


def _work(root: Path) -> Path:
    """A git work copy with a file, an executable, a link and a nested folder, committed."""
    work = root / "work"
    (work / "src" / "deep").mkdir(parents=True)
    (work / "src" / "a.py").write_text("A = 1\n")
    (work / "src" / "deep" / "data.bin").write_bytes(bytes(range(256)))
    (work / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (work / "run.sh").chmod(0o755)
    (work / "link").symlink_to("src/a.py")
    git(work, "init", "-q", "-b", "main")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "base")
    return work


def test_a_base_travels_in_the_bundle_and_is_written_out_byte_for_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BASES_DIR_VAR, str(tmp_path / "miner"))
    work = _work(tmp_path)
    tree = keep(work)
    assert tree == git(work, "rev-parse", "HEAD^{tree}").strip()
    pack = tmp_path / "pack"
    bundle(pack, [tree])
    assert f"refs/bases/{tree}" in git(work, "bundle", "list-heads", str(bundle_path(pack)))
    # Another machine has only the pack: the base comes out of its bundle.
    monkeypatch.setenv(BASES_DIR_VAR, str(tmp_path / "other"))
    with ThreadPoolExecutor(4) as pool:
        written = set(pool.map(lambda _: materialize(pack, tree), range(4)))
    assert written == {tmp_path / "other" / tree}
    (base,) = written
    git_free = tmp_path / "expected"
    git_free.mkdir()
    for rel in ("src", "run.sh", "link"):
        os.rename(work / rel, git_free / rel)
    assert tree_digest(base) == tree_digest(git_free)
    assert os.readlink(base / "link") == "src/a.py"
    assert base.joinpath("run.sh").stat().st_mode & stat.S_IXUSR
    assert sorted(p.name for p in (tmp_path / "other").iterdir() if p.name.startswith(".")) == [".lock"]


def test_a_second_bundle_keeps_the_bases_of_the_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BASES_DIR_VAR, str(tmp_path / "miner"))
    work = _work(tmp_path)
    first = keep(work)
    pack = tmp_path / "pack"
    bundle(pack, [first])
    (work / "src" / "a.py").write_text("A = 2\n")
    git(work, "commit", "-qam", "second")
    second = keep(work)
    # A fresh machine mining more: the first base is only in the pack's bundle.
    monkeypatch.setenv(BASES_DIR_VAR, str(tmp_path / "fresh"))
    keep(work)
    bundle(pack, [first, second])
    heads = git(work, "bundle", "list-heads", str(bundle_path(pack)))
    assert f"refs/bases/{first}" in heads and f"refs/bases/{second}" in heads


def test_a_base_in_no_bundle_is_one_line_naming_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BASES_DIR_VAR, str(tmp_path / "bases"))
    with pytest.raises(
        WorkspaceError, match=r"base 0123456789ab is not in .*bases\.bundle; mine the task again"
    ):
        materialize(tmp_path / "pack", "0123456789abcdef0123456789abcdef01234567")
    assert not (tmp_path / "bases" / "0123456789abcdef0123456789abcdef01234567").exists()


def test_a_task_whose_base_is_missing_does_not_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BASES_DIR_VAR, str(tmp_path / "bases"))
    pack = load_pack()
    task_dir = tmp_path / "tasks" / "t1_fix_pagination"
    task_dir.parent.mkdir()
    source = pack.tasks_dir / "t1_fix_pagination"
    for path in source.rglob("*"):
        target = task_dir / path.relative_to(source)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    toml = task_dir / "task.toml"
    toml.write_text(f'base = "{"ab" * 20}"\n' + toml.read_text())
    with pytest.raises(TaskError, match=r"task\.toml: base abababababab is not in .*; mine the task again"):
        load_tasks(pack, ["t1_fix_pagination"], tmp_path / "tasks")
