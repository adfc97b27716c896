"""Verification copies go to memory when there is room, else to the disk, and never get in each
other's way: where they go, how much room one copy has, what happens when it does not fit."""

import json
import os
import stat
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_faults import rig, rig_env, write_experiment

from rig.confine.untrusted import remove_trees
from rig.workspace import scratch
from rig.workspace.build import WorkspaceError
from rig.workspace.scratch import MAX_ROOM, VERIFY_ROOM_VAR, VERIFY_ROOT_VAR, choose_scratch, filesystem_type

SHM = Path("/dev/shm")
TASK = "t1_fix_pagination"


@pytest.fixture
def in_memory() -> Iterator[Path]:
    """A directory of this test's own on the machine's tmpfs, removed afterwards."""
    root = SHM / f"rig-test-{uuid.uuid4().hex}"
    root.mkdir()
    yield root
    remove_trees([root])


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(VERIFY_ROOT_VAR, raising=False)
    monkeypatch.delenv(VERIFY_ROOM_VAR, raising=False)


def _findmnt(path: Path) -> str:
    """The type of the mount in effect at `path` (the last of those stacked on one point)."""
    return subprocess.run(
        ["findmnt", "-n", "-o", "FSTYPE", "--target", str(path)], capture_output=True, text=True, check=True
    ).stdout.split()[-1]


def test_file_system_types_are_read_from_the_mount_table(tmp_path: Path) -> None:
    assert filesystem_type(SHM) == _findmnt(SHM) == "tmpfs"
    assert filesystem_type(tmp_path) == _findmnt(tmp_path)


def test_by_default_copies_go_to_a_private_directory_in_memory_one_folder_per_results_folder(
    tmp_path: Path, clean_env: None
) -> None:
    workspaces = tmp_path / "runs" / "exp"
    one = choose_scratch(workspaces, tmp_path / "a" / "exp", workers=2)
    other = choose_scratch(workspaces, tmp_path / "b" / "exp", workers=2)
    root = SHM / f"rig-{os.getuid()}"
    assert one.in_memory and one.folder.parent == root and one.folder.name.startswith("exp-")
    assert one.folder != other.folder and other.folder.parent == root
    st = os.lstat(root)
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700
    assert 0 < one.room <= MAX_ROOM
    # Shared by the workers: one worker's copy has at least as much room.
    alone = choose_scratch(workspaces, tmp_path / "a" / "exp", workers=1)
    assert alone.room >= one.room and alone.folder == one.folder


def test_a_link_planted_where_the_private_directory_goes_is_never_used(
    tmp_path: Path, in_memory: Path, clean_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scratch, "SHM", in_memory)
    (in_memory / f"rig-{os.getuid()}").symlink_to(tmp_path)
    chosen = choose_scratch(tmp_path / "runs" / "exp", tmp_path / "results" / "exp", workers=1)
    assert not chosen.in_memory and chosen.folder == tmp_path / "runs" / "exp"
    assert chosen.note.endswith(f"({in_memory}/rig-{os.getuid()} is not a directory of this user)")


def test_the_verify_root_and_room_variables_choose_place_and_room(
    tmp_path: Path, in_memory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspaces, results = tmp_path / "runs" / "exp", tmp_path / "results" / "exp"
    monkeypatch.setenv(VERIFY_ROOT_VAR, str(in_memory))
    monkeypatch.setenv(VERIFY_ROOM_VAR, "3")
    chosen = choose_scratch(workspaces, results, workers=2)
    assert chosen.in_memory and chosen.room == 3 * 2**20 and chosen.folder.parent == in_memory
    assert chosen.note == f"in memory (${VERIFY_ROOT_VAR})"

    disk = tmp_path / "verify"
    monkeypatch.setenv(VERIFY_ROOT_VAR, str(disk))
    chosen = choose_scratch(workspaces, results, workers=2)
    assert not chosen.in_memory and chosen.folder.parent == disk and disk.is_dir()
    kept = choose_scratch(workspaces, results, workers=2, keep_workspaces=True)
    assert kept.folder == chosen.folder
    monkeypatch.delenv(VERIFY_ROOT_VAR)
    kept = choose_scratch(workspaces, results, workers=2, keep_workspaces=True)
    assert kept.folder == workspaces and not kept.in_memory

    monkeypatch.setenv(VERIFY_ROOT_VAR, str(in_memory))
    monkeypatch.setenv(VERIFY_ROOM_VAR, "lots")
    with pytest.raises(WorkspaceError, match=f"^{VERIFY_ROOM_VAR}='lots' is not a whole number of MiB"):
        choose_scratch(workspaces, results, workers=2)
    monkeypatch.delenv(VERIFY_ROOM_VAR)
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    monkeypatch.setenv(VERIFY_ROOT_VAR, str(repo / "verify"))
    with pytest.raises(WorkspaceError, match=f"inside the git repository {repo}; set {VERIFY_ROOT_VAR} to"):
        choose_scratch(workspaces, results, workers=2)


def test_a_copy_that_outgrows_its_room_in_memory_is_made_again_on_disk_and_stale_copies_go(
    tmp_path: Path, in_memory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = "roomy"
    monkeypatch.setenv(VERIFY_ROOT_VAR, str(in_memory))
    monkeypatch.setenv(VERIFY_ROOM_VAR, "1")
    folder = choose_scratch(tmp_path / "runs" / name, tmp_path / "results" / name, workers=2).folder
    # What a rig killed mid-run leaves: a copy in memory nobody would remove before a reboot.
    stale = folder / "verify-killed" / "work"
    stale.mkdir(parents=True)
    (stale / "data.bin").write_bytes(b"x" * 4096)
    # 300 files of 3 KiB take more than the 1 MiB a copy has; the fixture alone fits.
    many = "mkdir data && cd data && for i in $(seq 1 300); do head -c 3000 /dev/zero > f$i; done"
    conditions = [
        {"name": "many", "harness_options": {"policy": "script", "commands": [many]}},
        {"name": "solution", "harness_options": {"policy": "solution"}},
    ]
    path = write_experiment(tmp_path, name, conditions, tasks=[TASK], workers=2)
    proc = rig(tmp_path, "run", str(path), env=rig_env(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"verification copies: {folder}, in memory (${VERIFY_ROOT_VAR})" in proc.stderr

    lines = (tmp_path / "results" / name / "runs.jsonl").read_text().splitlines()
    records = {r["condition"]: r for r in map(json.loads, lines)}
    many_record, solved = records["many"], records["solution"]
    moved = [w for w in many_record["warnings"] if w.startswith("no room to copy the workspace to <VERIFY>/")]
    assert len(moved) == 1 and moved[0].endswith(
        f"it would take more than {2**20} bytes; made again on disk, beside the workspace"
    )
    # Verified all the same, from the copy on disk: the agent did not fix the task.
    assert many_record["failing_stage"] == "pytest" and not many_record["infra"]["is_infra"]
    assert many_record["workspace"]["files"] > 300
    assert solved["success"] is True and not [w for w in solved["warnings"] if "no room" in w]
    assert str(in_memory) not in "\n".join(lines)
    # Every copy is gone, the stale one too, and the experiment's folder in memory with them.
    assert not folder.exists() and list(in_memory.iterdir()) == []
    assert list((tmp_path / "runs" / name).iterdir()) == []
