"""Reading agent-made trees (rig.confine.untrusted) and bounding verification commands
(rig.confine.proc.run_bounded).

The end-to-end cases are in tests/test_hostile.py; these pin down each primitive on real files:
FIFOs, device links, deep chains, wide directories, and a command that prints without end.
"""

import os
import sys
import time
from pathlib import Path

import pytest

from rig.confine.proc import OUTPUT_KEEP_BYTES, run_bounded, scrubbed_env
from rig.confine.untrusted import (
    Bounds,
    LimitExceeded,
    NoRoom,
    copy_tree,
    read_bounded,
    remove,
    remove_trees,
    walk,
)


def _deep_chain(root: Path, levels: int) -> None:
    """A directory chain `levels` deep below root, made with relative paths (no PATH_MAX limit)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        os.close(os.open("leaf", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
    finally:
        os.close(fd)


# One thread on a tmpfs (where passing the GIL costs more than creating a file), more on a disk.
@pytest.mark.parametrize("threads", [1, 2])
def test_copy_keeps_files_modes_and_inner_links_and_leaves_out_what_it_must_not_open(tmp_path, threads):
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text("x = 1\n")
    (src / "run.sh").write_text("#!/bin/sh\n")
    (src / "run.sh").chmod(0o755)
    os.mkfifo(src / "pkg" / "fifo.py")
    os.symlink("/dev/zero", src / "zero.py")
    os.symlink("../../outside", src / "pkg" / "up")
    os.symlink(str(src / "pkg" / "mod.py"), src / "absolute")
    os.symlink("pkg/mod.py", src / "inner")
    os.symlink("../run.sh", src / "pkg" / "sibling")
    (src / "node_modules" / "a").mkdir(parents=True)
    (src / "node_modules" / "a" / "index.js").write_text("")
    (src / ".git").write_text("gitdir: /elsewhere\n")

    stats = copy_tree(src, tmp_path / "copy", threads=threads)

    copy = tmp_path / "copy"
    assert (copy / "pkg" / "mod.py").read_text() == "x = 1\n"
    assert os.stat(copy / "run.sh").st_mode & 0o777 == 0o755
    assert os.readlink(copy / "inner") == "pkg/mod.py"
    assert os.readlink(copy / "pkg" / "sibling") == "../run.sh"
    assert sorted(os.listdir(copy)) == ["inner", "pkg", "run.sh"]
    assert sorted(os.listdir(copy / "pkg")) == ["mod.py", "sibling"]
    assert stats.special == ["pkg/fifo.py"]
    assert sorted(stats.outward_links) == ["absolute", "pkg/up", "zero.py"]
    assert stats.excluded == {"node_modules": 3, ".git": 1}


@pytest.mark.parametrize("threads", [1, 2])
def test_a_copy_past_its_room_stops_with_no_room_before_writing_the_file_that_does_not_fit(tmp_path, threads):
    src = tmp_path / "src"
    for d in range(4):
        (src / f"d{d}").mkdir(parents=True)
        for i in range(100):
            (src / f"d{d}" / f"f{i}").write_bytes(b"x" * 5000)
    # Each file takes two pages and an entry in memory: 9,216 bytes, so 400 of them 3.5 MiB.
    fits = copy_tree(src, tmp_path / "fits", threads=threads, room=400 * 9216)
    assert fits.files == 400

    with pytest.raises(
        NoRoom, match=r"^no room to copy the workspace to .*: it would take more than 921600 bytes$"
    ):
        copy_tree(src, tmp_path / "partial", threads=threads, room=100 * 9216)
    written = [p for p in (tmp_path / "partial").rglob("*") if p.is_file()]
    assert 0 < len(written) <= 100
    assert all(p.stat().st_size == 5000 for p in written)


def test_limits_stop_a_walk_early_with_what_was_counted(tmp_path):
    deep = tmp_path / "deep"
    deep.mkdir()
    _deep_chain(deep, 1500)
    start = time.monotonic()
    with pytest.raises(LimitExceeded) as caught:
        copy_tree(deep, tmp_path / "deep-copy", Bounds(max_depth=64))
    assert "max_depth" in caught.value.what and caught.value.stats.depth == 65
    wide = tmp_path / "wide"
    (wide / "node_modules").mkdir(parents=True)
    for i in range(500):
        (wide / "node_modules" / str(i)).touch()
    with pytest.raises(LimitExceeded) as caught:
        copy_tree(wide, tmp_path / "wide-copy", Bounds(max_entries=100))
    assert "max_files" in caught.value.what and caught.value.stats.entries == 101
    assert time.monotonic() - start < 30
    # Removal goes all the way down, with no recursion and no PATH_MAX, several trees side by side.
    assert remove_trees([deep, wide, tmp_path / "missing"]) == [None, None, None]
    assert not deep.exists() and not wide.exists()


def test_remove_takes_whatever_is_there_and_never_a_links_target(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep").write_text("kept\n")
    os.mkfifo(tmp_path / "fifo")
    os.symlink(target, tmp_path / "link")
    (tmp_path / "tree" / "a").mkdir(parents=True)
    for name in ("fifo", "link", "tree", "missing"):
        remove(tmp_path / name)
        assert not os.path.lexists(tmp_path / name)
    assert (target / "keep").read_text() == "kept\n"


def test_bounded_reads_never_block_on_a_fifo_or_follow_a_link(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    os.symlink("/dev/zero", tmp_path / "zero")
    (tmp_path / "big").write_bytes(b"x" * 1000)
    assert read_bounded(tmp_path / "fifo", 10) is None
    assert read_bounded(tmp_path / "zero", 10) is None
    assert read_bounded(tmp_path / "big", 10) == b"x" * 10
    assert sorted(rel for rel, _ in walk(tmp_path)) == ["big", "fifo", "zero"]


def test_a_verification_command_printing_without_end_keeps_a_bounded_head_and_tail(tmp_path):
    script = (
        "import sys\n"
        "chunk = b'y' * (1 << 20)\n"
        f"for _ in range({3 * OUTPUT_KEEP_BYTES >> 20}):\n"
        "    sys.stdout.buffer.write(chunk)\n"
        "sys.stdout.buffer.write(b'\\nLAST LINE\\n')\n"
    )
    done = run_bounded([sys.executable, "-c", script], tmp_path, scrubbed_env(tmp_path), 120)
    assert done.returncode == 0 and not done.timed_out
    assert done.stdout.strip().splitlines()[-1] == "LAST LINE"
    assert len(done.stdout) < 2 * OUTPUT_KEEP_BYTES + 100
    assert f"[rig: {3 * OUTPUT_KEEP_BYTES - 2 * OUTPUT_KEEP_BYTES + 11} bytes omitted]" in done.stdout


def test_a_child_holding_the_pipes_does_not_keep_a_finished_command_alive(tmp_path):
    start = time.monotonic()
    done = run_bounded(["/bin/sh", "-c", "sleep 600 & echo started"], tmp_path, scrubbed_env(tmp_path), 120)
    assert done.returncode == 0 and done.stdout.strip() == "started" and not done.timed_out
    assert time.monotonic() - start < 30
