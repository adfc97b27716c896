"""A disk that fills up during an experiment: the run that found it full becomes an infrastructure
record (rule `disk_full`) or, when the records' own disk is full, stays unrecorded; every record
already written is kept byte for byte; the experiment stops with one line naming the disk; freeing
space and rerunning resumes it.

Each case is real: `rig run` on a small tmpfs mounted in a mount namespace of the test's own
(root and `unshare -m`, as `make test` runs the suite), filled up by the test or by the run's agent.
"""

import errno
import json
import os
import subprocess
from pathlib import Path

import pytest
from test_faults import RIG, assert_store_sound, rig_env, write_experiment

from rig.run.leftovers import ABANDONED_FILE
from rig.store.results import ResultsStore
from rig.verify.classify import full_disk
from rig.workspace.scratch import disk_name

TASK = "t1_fix_pagination"
NAME = "filled"
RUNS = [f"{TASK}__fill__r{rep:02d}" for rep in (1, 2, 3)]

# Three `rig run`s in one mount namespace, on a tmpfs at $MNT ($MOUNT_OPTIONS): the first records
# run 1 (max_runs), then the disk is filled ($PREFILL: every inode taken by empty files) and the
# second runs until the disk stops it, then the fillers go (what the user does) and the third resumes.
SCRIPT = r"""
set -e
mount -t tmpfs -o "$MOUNT_OPTIONS" tmpfs "$MNT"
mkdir -p "$RIG_RUNS_ROOT" "$RIG_RESULTS_ROOT" "$RIG_VERIFY_ROOT"
set +e
for n in 1 2 3; do
    if [ "$n" = 2 ]; then
        if [ -n "$PREFILL" ]; then
            mkdir "$PREFILL" && i=0 && while true > "$PREFILL/$i" 2>/dev/null; do i=$((i+1)); done
        fi
        sed -i '/^max_runs/d' "$EXP"
    fi
    if [ "$n" = 3 ]; then
        ls -A "$RIG_RUNS_ROOT/$NAME" > "$OUT/left" 2>/dev/null
        find "$MNT" -name filler -prune -exec rm -rf {} +
    fi
    "$RIG" run "$EXP" > "$OUT/$n.out" 2> "$OUT/$n.err"
    echo $? > "$OUT/$n.rc"
    cp "$RIG_RESULTS_ROOT/$NAME/runs.jsonl" "$OUT/runs-$n.jsonl"
done
set -e
cp -r "$RIG_RESULTS_ROOT/$NAME" "$OUT/results"
"""
# rig run checks before it starts that the runs root has room for a workspace (256 MiB, preflight),
# so a runs root on the tmpfs runs out of inodes, which that check does not count, instead of bytes.
RUNS_ROOT_FS = "size=300m,nr_inodes=2000"
RESULTS_FS = "size=32m"
# Every inode the agent can take, in its workspace.
TAKE_INODES = "mkdir filler && cd filler && i=0 && while true > $i 2>/dev/null; do i=$((i+1)); done"


def run_filling(tmp_path: Path, full: str, prefill: bool, fill: str) -> tuple[Path, Path]:
    """Run SCRIPT with the `full` root ("runs" or "results") on the tmpfs and the agent of the
    second run's first attempt running `fill`; (the tmpfs's mount point, the folder of outputs)."""
    mnt, out = tmp_path / "mnt", tmp_path / "out"
    mnt.mkdir()
    out.mkdir()
    on_disk = tmp_path / "disk"
    runs = (mnt if full == "runs" else on_disk) / "runs"
    results = (mnt if full == "results" else on_disk) / "results"
    # Only the second repetition's first attempt fills the disk: the resumed attempt does not.
    command = f'case "$HOME" in */{RUNS[1]}/attempt-1/*) {fill};; esac'
    exp = write_experiment(
        tmp_path,
        NAME,
        [{"name": "fill", "harness_options": {"policy": "script", "commands": [command]}}],
        tasks=[TASK],
        repetitions=3,
        workers=1,
        max_runs=1,
    )
    env = rig_env(tmp_path) | {
        "RIG_RUNS_ROOT": str(runs),
        "RIG_RESULTS_ROOT": str(results),
        # Beside the runs root: on the tmpfs when the workspaces are.
        "RIG_VERIFY_ROOT": str(runs.parent / "copies"),
        "MNT": str(mnt),
        "MOUNT_OPTIONS": RUNS_ROOT_FS if full == "runs" else RESULTS_FS,
        "OUT": str(out),
        "RIG": RIG,
        "EXP": str(exp),
        "NAME": NAME,
        "PREFILL": str(mnt / "filler") if prefill else "",
    }
    proc = subprocess.run(
        ["unshare", "-m", "sh", "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr
    return mnt, out


def outcome(out: Path, n: int) -> tuple[int, str]:
    """The exit code and standard error of the `n`th `rig run`."""
    return int((out / f"{n}.rc").read_text()), (out / f"{n}.err").read_text()


@pytest.mark.parametrize(
    ("prefill", "fill", "step"),
    [(True, "true", "prepare"), (False, TAKE_INODES, "collect")],
    ids=["full-before-the-workspace", "filled-by-the-agent-before-the-copy"],
)
def test_a_full_disk_under_the_workspaces_quarantines_that_run_and_stops_the_experiment(
    tmp_path: Path, prefill: bool, fill: str, step: str
) -> None:
    mnt, out = run_filling(tmp_path, "runs", prefill, fill)
    rc, err = outcome(out, 1)
    assert rc == 3 and "budget" in err, err[-2000:]
    first = (out / "runs-1.jsonl").read_bytes()
    assert [json.loads(line)["run_id"] for line in first.splitlines()] == RUNS[:1]

    rc, err = outcome(out, 2)
    assert "Traceback" not in err, err[-3000:]
    assert rc == 3, err[-3000:]
    assert err.splitlines()[-1] == (
        f"error: stopped: no space left on {mnt} (tmpfs) in step {step!r} of run {RUNS[1]}; "
        "free space on it, then rerun to resume"
    )
    # The record written before is kept as it was; no run started after the one that found the disk full.
    assert (out / "runs-2.jsonl").read_bytes() == first
    # Nothing of the run is left on the full disk: its workspace and copy went with it.
    assert (out / "left").read_text() == ""

    rc, err = outcome(out, 3)
    assert rc == 0, err[-3000:]
    assert (out / "runs-3.jsonl").read_bytes().startswith(first)
    runs, quarantine = assert_store_sound(ResultsStore(out / "results"))
    assert sorted(r["run_id"] for r in runs) == RUNS
    assert [(r["run_id"], r["attempt"], r["infra"]["rule"]) for r in quarantine] == [
        (RUNS[1], 1, "disk_full")
    ]
    assert quarantine[0]["infra"]["detail"] == f"no space left on {mnt} (tmpfs) in step {step!r}"
    assert "No space left on device" in quarantine[0]["rig_error"]


def test_a_full_results_disk_stops_the_experiment_in_one_line_and_keeps_every_record(tmp_path: Path) -> None:
    # The agent's home is in its attempt folder: it fills the disk the records are on.
    mnt, out = run_filling(tmp_path, "results", False, 'head -c 1G /dev/zero > "$HOME/filler"')
    first = (out / "runs-1.jsonl").read_bytes()
    assert [json.loads(line)["run_id"] for line in first.splitlines()] == RUNS[:1]

    rc, err = outcome(out, 2)
    assert "Traceback" not in err, err[-3000:]
    last = err.splitlines()[-1]
    assert rc != 0 and last.startswith("error: ") and f"{mnt} (tmpfs)" in last, err[-3000:]
    assert "free space on" in last and "rerun to resume" in last, last
    assert (out / "runs-2.jsonl").read_bytes() == first

    rc, err = outcome(out, 3)
    assert rc == 0, err[-3000:]
    assert (out / "runs-3.jsonl").read_bytes().startswith(first)
    runs, quarantine = assert_store_sound(ResultsStore(out / "results"))
    assert sorted(r["run_id"] for r in runs) == RUNS
    # The attempt that filled the disk could not be recorded: it is kept, marked abandoned.
    filled = out / "results" / "runs" / RUNS[1] / "attempt-1"
    recorded = {(r["run_id"], r["attempt"]) for r in runs + quarantine}
    assert (RUNS[1], 1) in recorded or (filled / ABANDONED_FILE).is_file()


def test_only_a_disk_that_is_full_is_taken_for_one(tmp_path: Path) -> None:
    # The words alone (an agent's file name, quoted in git's error) stop nothing on a disk with room.
    said = RuntimeError(f"git add failed: cannot add 'x {os.strerror(errno.ENOSPC)}'")
    assert full_disk(said, [tmp_path]) is None
    # The error itself says so: the disk of the file it names.
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "f"))
    wrapped = RuntimeError("copy failed")
    wrapped.__cause__ = full
    assert full_disk(wrapped, [tmp_path]) == disk_name(tmp_path)
    assert full_disk(RuntimeError("copy failed"), [tmp_path]) is None
