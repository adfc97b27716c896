"""Fault injection: the rig loses and corrupts nothing when the runner is killed, the disk fills up,
inputs are malformed, an agent writes hostile file names, or the model provider fails.

Everything is real: `rig run` subprocesses driving the scripted agent, the pinned harness CLIs
against the mock model on 127.0.0.1, git, and a tiny tmpfs in a private mount namespace. Nothing
of the rig is mocked.
"""

import contextlib
import getpass
import json
import os
import random
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest
from builtin_pack import FIXTURE_DIR

from harnesses.mock_model.server import Faults, MockModelServer
from harnesses.mock_model.session import policy_for
from harnesses.registry import calibrated_names, mock_protocols
from rig.experiment.load import load_experiment
from rig.packs.tasks import load_tasks
from rig.store.redact import Redactor
from rig.store.results import ResultsStore
from rig.workspace.build import collect_diff, copy_fixture, init_baseline

SMALL_RESULTS = Path(__file__).parent / "data" / "results_small" / "results_small"

RIG = str(Path(sys.executable).with_name("rig"))
ALL_TASKS = [t.id for t in load_tasks()]


# --- helpers ------------------------------------------------------------------------------------


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(value)


def write_experiment(folder: Path, name: str, conditions: list[dict], **settings) -> Path:
    """An experiment config `folder/name.toml`; settings are top-level keys, timeouts a table."""
    timeouts = settings.pop("timeouts", {"agent_s": 60, "stall_s": 30})
    settings.setdefault("harness", "scripted")
    settings.setdefault("tasks", ALL_TASKS)
    lines = [f"{key} = {toml_value(value)}" for key, value in settings.items()]
    lines += ["[timeouts]", *(f"{key} = {toml_value(value)}" for key, value in timeouts.items())]
    for cond in conditions:
        lines += ["", "[[conditions]]", *(f"{key} = {toml_value(value)}" for key, value in cond.items())]
    path = folder / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def rig_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "RIG_RESULTS_ROOT": str(tmp_path / "results"),
        "RIG_RUNS_ROOT": str(tmp_path / "runs"),
        **extra,
    }


def rig(tmp_path: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 600):
    return subprocess.run(
        [RIG, *args], capture_output=True, text=True, timeout=timeout, env=env or rig_env(tmp_path)
    )


def listing(*roots: Path) -> dict[str, tuple[int, int]]:
    """Every file and directory below `roots` with its size and mtime: what a command wrote.

    The store's lock file is opened (and so touched) by any reader that takes the lock; only its
    existence and size count.
    """
    found = {}
    for root in roots:
        if not root.exists():
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            for name in [*dirnames, *filenames]:
                path = os.path.join(dirpath, name)
                st = os.lstat(path)
                found[path] = (st.st_size, 0 if name == ".lock" else st.st_mtime_ns)
    return found


def is_one_line_error(proc: subprocess.CompletedProcess) -> bool:
    return (
        proc.returncode not in (0, None)
        and proc.stderr.startswith("error: ")
        and proc.stderr.count("\n") == 1
    )


def stray_processes(root: Path) -> list[str]:
    """Live processes (zombies aside) whose command line or working directory lies under `root`."""
    needle = f"{root}/"
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            state = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()[0]
            cmdline = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            try:
                cwd = os.readlink(Path(entry.path, "cwd"))
            except OSError:
                cwd = ""
        except (OSError, IndexError):
            continue
        if state != "Z" and (needle in cmdline or f"{cwd}/".startswith(needle)):
            found.append(f"{entry.name} {cmdline.strip()[:160]}")
    return found


def wait_for_no_strays(root: Path, timeout: float) -> tuple[list[str], list[str], float]:
    """(processes seen at first, processes still alive after `timeout`, seconds until none were left)."""
    start = time.monotonic()
    first = stray_processes(root)
    left = first
    while left and time.monotonic() - start < timeout:
        time.sleep(0.2)
        left = stray_processes(root)
    return first, left, time.monotonic() - start


def complete_lines(path: Path) -> list[bytes]:
    """The newline-terminated lines of a file (a torn last line without its newline excluded)."""
    if not path.exists():
        return []
    data = path.read_bytes()
    return data[: data.rfind(b"\n") + 1].split(b"\n")[:-1]


# --- 1. kill -9 of the runner at random points ----------------------------------------------------

KILL_TRIALS = 15
KILL_TASKS = 2
KILL_CONDITIONS = [
    {"name": "nothing", "harness_options": {"policy": "nothing"}},
    {"name": "coin", "harness_options": {"policy": "bernoulli", "p": 0.5}},
    {"name": "flaky", "harness_options": {"policy": "flaky"}},
]


def start_runner(exp: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """`rig run exp` in a session of its own (so it can be killed with its agents), output discarded."""
    return subprocess.Popen(
        [RIG, "run", str(exp)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def stop_runner(runner: subprocess.Popen) -> None:
    """Kill `runner`'s session (it and its agents) unless it has ended."""
    if runner.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(runner.pid, signal.SIGKILL)
    runner.wait()


def attempt_dirs(root: Path) -> dict[Path, int]:
    """Every attempt folder with its inode: a folder deleted and created again gets a new one."""
    return {p: p.stat().st_ino for p in root.glob("runs/*/attempt-*")}


def assert_store_sound(store: ResultsStore) -> tuple[list[dict], list[dict]]:
    """Both JSONL files parse, nothing is recorded twice, every record matches its own folder."""
    runs, quarantine = store.read_runs(), store.read_quarantine()
    for path in (store.runs_path, store.quarantine_path):
        for line in complete_lines(path):
            assert isinstance(json.loads(line), dict), (path, line[:200])
    ids = [r["run_id"] for r in runs]
    assert len(ids) == len(set(ids)), (
        f"duplicate scored runs: {sorted(i for i, n in Counter(ids).items() if n > 1)}"
    )
    attempts = [(r["run_id"], r["attempt"]) for r in runs + quarantine]
    assert len(attempts) == len(set(attempts)), "an attempt was recorded twice"
    for record in runs + quarantine:
        folder = store.root / record["artifacts"]
        assert (folder.parent.name, folder.name) == (record["run_id"], f"attempt-{record['attempt']}")
        assert json.loads((folder / "record.json").read_text()) == record, folder
    return runs, quarantine


def where_killed(new_dirs: list[Path], recorded: set[tuple[str, int]]) -> str:
    """The stage the newest unrecorded attempt had reached when the runner died (for the report)."""
    unrecorded = [d for d in new_dirs if (d.parent.name, int(d.name.split("-")[1])) not in recorded]
    if not new_dirs:
        return "startup"
    if not unrecorded:
        return "between runs"
    names = set().union(*({p.name for p in d.iterdir()} for d in unrecorded))
    if "record.json" in names:
        return "record written, not appended"
    if "check.json" in names:
        return "hidden tests"
    if "session.jsonl" in names:
        sessions = [
            (d / "session.jsonl").read_text(errors="replace")
            for d in unrecorded
            if (d / "session.jsonl").exists()
        ]
        finished = any('"stopReason": "stop"' in text for text in sessions)
        return "check.py" if finished else "agent"
    return "workspace preparation"


@pytest.mark.slow
@pytest.mark.parametrize(("workers", "repetitions"), [(1, 1), (2, 2)])
def test_kill_9_at_random_points_then_resume_loses_and_duplicates_nothing(tmp_path, workers, repetitions):
    """SIGKILL `rig run`'s process group 15 times at random points, resuming each time, then finish.

    After every kill both JSONL files parse and hold no duplicate; attempt folders are never removed
    or numbered again; at the end every planned run has exactly one record, from the attempt it
    names, and no process the runs started is left.
    """
    rng = random.Random(1000 + workers)
    name = f"killed_w{workers}"
    exp = write_experiment(
        tmp_path,
        name,
        KILL_CONDITIONS,
        tasks=ALL_TASKS[:KILL_TASKS],
        workers=workers,
        repetitions=repetitions,
        seed=workers,
        max_consecutive_infra=100,
    )
    store = ResultsStore(tmp_path / "results" / name)
    planned = {
        f"{t}__{c['name']}__r{r:02d}"
        for t in ALL_TASKS[:KILL_TASKS]
        for c in KILL_CONDITIONS
        for r in range(1, repetitions + 1)
    }
    env = rig_env(tmp_path)
    stages: Counter[str] = Counter()
    strays_after_kill: list[int] = []
    kills = trials = 0
    seen = attempt_dirs(store.root)
    while kills < KILL_TRIALS and trials < 3 * KILL_TRIALS:
        trials += 1
        runner = start_runner(exp, env)
        try:
            # Kill after 0-1 more attempts were recorded, then a random part of a typical attempt's
            # time: spread over startup, preparation, agent, verification and appends on a fast or
            # slow machine. Near the end, kill early so that runs are left for the next trials and
            # the final resume.
            runs_so_far = store.read_runs()
            endgame = len(planned) - len(runs_so_far) < 2 * workers + 2
            more = 0 if endgame else rng.choice((0, 0, 1))
            target = len(runs_so_far) + len(store.read_quarantine()) + more
            walls = sorted(r["wall_s"] for r in runs_so_far) or [3.0]
            delay = rng.uniform(0.05, (0.3 if endgame else 0.8) * walls[len(walls) // 2])
            deadline = time.monotonic() + 300
            while runner.poll() is None and time.monotonic() < deadline:
                if (
                    len(complete_lines(store.runs_path)) + len(complete_lines(store.quarantine_path))
                    >= target
                ):
                    break
                time.sleep(0.05)
            try:
                runner.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                kills += 1
        finally:
            stop_runner(runner)
        runs, quarantine = assert_store_sound(store)
        now = attempt_dirs(store.root)
        for path, inode in seen.items():
            assert now.get(path) == inode, f"attempt folder {path} was removed or recreated"
        new = sorted(set(now) - set(seen))
        for path in new:
            older = [int(p.name.split("-")[1]) for p in seen if p.parent == path.parent]
            assert int(path.name.split("-")[1]) > max(older, default=0), f"{path} reuses an attempt number"
        recorded = {(r["run_id"], r["attempt"]) for r in runs + quarantine}
        stages[where_killed(new, recorded)] += 1
        strays_after_kill.append(len(stray_processes(tmp_path)))
        seen = now
    assert kills >= KILL_TRIALS, f"only {kills} kills in {trials} trials"
    recorded_before_final = len(store.read_runs())

    final = rig(tmp_path, "run", str(exp), env=env)
    assert final.returncode == 0, final.stderr[-3000:]
    runs, quarantine = assert_store_sound(store)
    assert sorted(r["run_id"] for r in runs) == sorted(planned)
    for record in runs:
        condition, attempt = record["condition"], record["attempt"]
        assert not record["infra"]["is_infra"]
        if condition == "nothing":
            assert not record["success"]
        elif condition == "flaky":
            assert record["success"] and attempt >= 2, record["run_id"]
        else:
            # The coin is seeded by the attempt folder: the record belongs to the attempt it names.
            heads = random.Random(f"{record['run_id']}/attempt-{attempt}").random() < 0.5
            assert record["success"] == heads, record["run_id"]
    assert all(r["condition"] == "flaky" and r["attempt"] == 1 for r in quarantine), quarantine
    assert len({r["run_id"] for r in quarantine}) == len(quarantine)
    first, left, waited = wait_for_no_strays(tmp_path, timeout=60)
    unrecorded = len(attempt_dirs(store.root)) - len(runs) - len(quarantine)
    leftover_workspaces = len(list((tmp_path / "runs" / name).glob("*")))
    print(
        f"\nkill -9 x{kills} in {trials} trials (workers={workers}): stages hit {dict(stages)}; "
        f"processes of the test alive right after each kill {strays_after_kill}; "
        f"{recorded_before_final}/{len(planned)} runs recorded before the final resume; "
        f"after it {len(first)} processes left, gone after "
        f"{waited:.1f}s; {unrecorded} attempt folders of killed attempts kept without a record; "
        f"{leftover_workspaces} workspaces left in the runs root"
    )
    assert left == [], f"processes still alive 60 s after the last run: {left}"


def machine_redactor(tmp_path: Path) -> Redactor:
    """The redactor a run of `rig_env(tmp_path)` uses (its verification root aside)."""
    return Redactor.for_machine(
        runs_root=(tmp_path / "runs").resolve(),
        repo_root=Path(__file__).resolve().parents[1],
        results_root=(tmp_path / "results").resolve(),
    )


def unredacted(folder: Path, redactor: Redactor) -> list[str]:
    """The files below `folder` (links never followed) in which the machine still shows."""
    found = []
    for path in sorted(folder.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        if redactor.data(data) != data or str(Path.home()).encode() + b"/" in data:
            found.append(str(path.relative_to(folder)))
    return found


@pytest.mark.parametrize("repair", [["run"], ["status", "--repair"]], ids=["resume", "status-repair"])
def test_kill_9_mid_run_leaves_every_attempt_redacted_and_no_stale_workspace(tmp_path, repair):
    """SIGKILL `rig run` while one run's agent has written the machine's home, user and host into
    its session, streams and home, and another run is recorded; then resume (or `rig status
    --repair`): every attempt folder is redacted, the unrecorded one is marked abandoned, and the
    killed runner's workspace is gone."""
    from rig.run.leftovers import ABANDONED_FILE, CLAIM_FILE, usage

    home, user, host = str(Path.home()), getpass.getuser(), socket.gethostname()
    leak = f"{home}/.ssh/id_ed25519 {user}@{host}"
    name = "killed_leaky"
    exp = write_experiment(
        tmp_path,
        name,
        [
            {"name": "nothing", "harness_options": {"policy": "nothing"}},
            {
                "name": "leaky",
                "harness_options": {
                    "policy": "script",
                    # The pause only in the first attempt: a resumed run ends at once.
                    "commands": [
                        f'echo "{leak}"; echo "{leak}" > "$HOME/leak.txt"; echo "{leak}" >&2',
                        'case "$HOME" in */attempt-1/*) sleep 30;; esac',
                    ],
                },
            },
        ],
        tasks=ALL_TASKS[:1],
        workers=2,
    )
    store = ResultsStore(tmp_path / "results" / name)
    env = rig_env(tmp_path)
    runner = start_runner(exp, env)
    leaky = store.root / "runs" / f"{ALL_TASKS[0]}__leaky__r01" / "attempt-1"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and runner.poll() is None:
            session = leaky / "session.jsonl"
            if len(complete_lines(store.runs_path)) == 1 and session.exists() and host in session.read_text():
                break
            time.sleep(0.05)
    finally:
        stop_runner(runner)
    redactor = machine_redactor(tmp_path)
    # What the kill left, so the test can fail: a raw session, home and streams, a claimed workspace.
    assert {"session.jsonl", "stdout.log", "home"} <= {p.name for p in leaky.iterdir()}
    assert "session.jsonl" in unredacted(leaky, redactor) and (leaky / "home" / "leak.txt").is_file()
    workspaces = tmp_path / "runs" / name
    assert [(p / CLAIM_FILE).is_file() for p in workspaces.iterdir()] == [True]
    assert "1 left by stopped runners" in usage(tmp_path / "runs")

    proc = rig(tmp_path, *repair, str(exp))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "1 attempt folders" in proc.stdout + proc.stderr
    attempts = sorted(store.root.glob("runs/*/attempt-*"))
    recorded = {r["artifacts"] for r in store.read_runs() + store.read_quarantine()}
    assert len(attempts) == (3 if repair == ["run"] else 2) and len(recorded) == len(attempts) - 1
    for folder in attempts:
        assert unredacted(folder, redactor) == [], folder
        marked = (folder / ABANDONED_FILE).exists()
        assert marked == (folder.relative_to(store.root).as_posix() not in recorded), folder
    abandoned = json.loads((leaky / ABANDONED_FILE).read_text())
    assert "before this attempt was recorded" in abandoned["reason"] and abandoned["when"]
    assert "<HOME>/.ssh/id_ed25519 <user>@<host>" in (leaky / "home" / "leak.txt").read_text()
    assert list(workspaces.iterdir()) == []
    again = rig(tmp_path, "status", "--repair", str(exp))
    assert again.returncode == 0 and "nothing to repair" in again.stdout, again.stdout + again.stderr


def test_a_workspace_is_stale_once_its_runner_is_gone_never_while_it_lives_or_when_kept(tmp_path):
    from rig.run.leftovers import claim, release, remove_stale, stale_trees

    live, dead, kept, unclaimed = (tmp_path / name for name in ("live", "dead", "kept", "unclaimed"))
    for tree in (live, dead, kept, unclaimed):
        tree.mkdir()
    held = claim(live)
    # Claimed by a process that has exited since: the kernel dropped its lock.
    code = f"from pathlib import Path; from rig.run.leftovers import claim; claim(Path({str(dead)!r}))"
    subprocess.run([sys.executable, "-c", code], check=True)
    release(kept, claim(kept), kept=True)
    (tmp_path / "a-link").symlink_to(dead)
    assert stale_trees(tmp_path) == [dead]
    assert remove_stale(tmp_path) == ([dead], [])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-link", "kept", "live", "unclaimed"]
    release(live, held, kept=False)
    assert stale_trees(tmp_path) == [live]


APPEND_WRITER = """
import sys
from rig.store.results import ResultsStore

store = ResultsStore(sys.argv[1])
i = len(store.read_runs())
while True:
    store.append_run({"i": i, "pad": "p" * (4_000_000 + 997 * i)})
    i += 1
"""


def _kill_writers(root: Path, rng: random.Random, trials: int) -> tuple[int, int]:
    """Start and SIGKILL `trials` writers in turn, checking the file after each; (appends, torn tails)."""
    store = ResultsStore(root)
    appended = 0
    for _ in range(trials):
        writer = subprocess.Popen([sys.executable, "-c", APPEND_WRITER, str(root)], start_new_session=True)
        time.sleep(rng.uniform(0.12, 0.35))
        os.killpg(writer.pid, signal.SIGKILL)
        writer.wait()
        records = store.read_runs()
        assert [r["i"] for r in records] == list(range(len(records)))
        for line in complete_lines(store.runs_path):
            json.loads(line)
        store.append_run({"i": len(records), "pad": ""})
        assert [r["i"] for r in store.read_runs()] == list(range(len(records) + 1))
        assert store.runs_path.read_bytes().endswith(b'"pad": ""}\n')
        appended += len(records)
        store.runs_path.unlink()  # keeps the file small; torn/ keeps what was cut
    torn = list((root / "torn").glob("runs.jsonl.*")) if (root / "torn").exists() else []
    assert all(not t.read_bytes().endswith(b"\n") for t in torn)
    return appended, len(torn)


@pytest.mark.slow
def test_kill_9_mid_append_never_leaves_an_unreadable_file(tmp_path):
    """Appends of 4 MB records, killed at random: a torn tail at worst, repaired by the next append."""
    # On tmpfs fsync costs nothing, so most of an append is the write itself: more kills land in it.
    shm = Path("/dev/shm")
    base = Path(tempfile.mkdtemp(dir=shm)) if shm.is_dir() and os.access(shm, os.W_OK) else tmp_path
    try:
        appended, torn = _kill_writers(base / "exp", random.Random(7), trials=20)
    finally:
        if base != tmp_path:
            shutil.rmtree(base, ignore_errors=True)
    print(f"\n{appended} appends in 20 killed writers; {torn} torn tails cut and kept in torn/")


# --- 2. disk full during an append --------------------------------------------------------------

DISK_FULL_SCRIPT = r"""
import json, os, subprocess, sys
from pathlib import Path
from rig.store.results import ResultsStore, StoreError

mnt = Path(sys.argv[1])
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], check=True)
out = {}
store = ResultsStore(mnt / "exp")
earlier = [{"i": i, "pad": "x" * 300} for i in range(3)]
for record in earlier:
    store.append_run(record)
store.append_quarantine({"q": 0})
runs_before, quarantine_before = store.runs_path.read_bytes(), store.quarantine_path.read_bytes()
# A twin of runs.jsonl, in the same state, shows what a raw write does on this full disk.
probe = mnt / "probe"
probe.write_bytes(runs_before)
fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT)
try:
    while True:
        os.write(fd, b"\0" * 4096)
except OSError as exc:
    out["filled"] = exc.strerror
os.close(fd)
big = {"i": 99, "pad": "z" * 6000}
fd = os.open(probe, os.O_WRONLY | os.O_APPEND)
out["probe_written"] = os.write(fd, json.dumps(big).encode() + b"\n")
os.close(fd)

def attempt(fn, *args):
    try:
        fn(*args)
    except StoreError as exc:
        return "StoreError", str(exc)
    except Exception as exc:
        return type(exc).__name__, str(exc)
    return None, None

out["runs_error"] = attempt(store.append_run, big)
out["runs_unchanged"] = store.runs_path.read_bytes() == runs_before
out["quarantine_error"] = attempt(store.append_quarantine, big)
out["quarantine_unchanged"] = store.quarantine_path.read_bytes() == quarantine_before
out["read_while_full"] = store.read_runs() == earlier

# A torn tail left by a crash (it fits in the file's last page) cannot be moved to torn/ on a full
# disk: the append must refuse without touching anything.
torn = b'{"i": 50, "pad": "cut by a cr'
with open(store.runs_path, "ab") as f:
    f.write(torn)
out["torn_error"] = attempt(store.append_run, {"i": 51})
out["torn_kept"] = store.runs_path.read_bytes() == runs_before + torn
out["torn_dir_files"] = sorted(p.name for p in store.torn_dir.glob("*")) if store.torn_dir.exists() else []
out["read_with_torn"] = store.read_runs() == earlier

os.unlink(mnt / "filler")
store.append_run({"i": 4})
store.append_quarantine({"q": 1})
out["runs_after"] = store.read_runs()
out["quarantine_after"] = store.read_quarantine()
out["runs_lines"] = [json.loads(line) for line in store.runs_path.read_bytes().splitlines()]
out["torn_saved"] = [p.read_bytes().decode() for p in sorted(store.torn_dir.glob("*"))]
print(json.dumps(out))
"""


# These need root and `unshare -m` (as in CI) to mount a tiny tmpfs; elsewhere they fail.


def test_disk_full_mid_append_is_a_clear_error_and_leaves_the_file_as_it_was(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = subprocess.run(
        ["unshare", "-m", sys.executable, "-c", DISK_FULL_SCRIPT, str(mnt)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["filled"] == "No space left on device"
    # Without the cut-back, this much of the record would have stayed in runs.jsonl.
    assert 0 < out["probe_written"] < 6000
    for key, name in (("runs_error", "runs.jsonl"), ("quarantine_error", "quarantine.jsonl")):
        kind, message = out[key]
        assert kind == "StoreError", out[key]
        assert "\n" not in message and str(mnt / "exp" / name) in message, message
        assert "No space left on device" in message and "free space" in message, message
    assert "bytes written were cut back" in out["runs_error"][1]
    assert out["runs_unchanged"] and out["quarantine_unchanged"] and out["read_while_full"]
    kind, message = out["torn_error"]
    assert kind == "StoreError" and "torn" in message and "free space" in message and "\n" not in message
    assert out["torn_kept"] and out["torn_dir_files"] == [] and out["read_with_torn"]
    earlier = [{"i": i, "pad": "x" * 300} for i in range(3)]
    assert out["runs_after"] == out["runs_lines"] == [*earlier, {"i": 4}]
    assert out["quarantine_after"] == [{"q": 0}, {"q": 1}]
    assert out["torn_saved"] == ['{"i": 50, "pad": "cut by a cr']


RUN_ON_FULL_DISK = r"""
set -e
mount -t tmpfs -o size=64k tmpfs "$MNT"
set +e
"$RIG" run "$EXP" > "$OUT/first.out" 2> "$OUT/first.err"
echo $? > "$OUT/first.rc"
set -e
cp "$MNT/full/runs.jsonl" "$OUT/runs_when_full.jsonl" 2>/dev/null || touch "$OUT/runs_when_full.jsonl"
mount -o remount,size=20m "$MNT"
set +e
"$RIG" run "$EXP" > "$OUT/second.out" 2> "$OUT/second.err"
echo $? > "$OUT/second.rc"
set -e
cp -r "$MNT/full" "$OUT/results"
"""


@pytest.mark.slow
def test_rig_run_on_a_full_disk_stops_then_resumes_without_losing_a_run(tmp_path):
    exp = write_experiment(
        tmp_path,
        "full",
        [{"name": "nothing", "harness_options": {"policy": "nothing"}}],
        tasks=["t1_fix_pagination"],
        repetitions=3,
    )
    mnt, out = tmp_path / "mnt", tmp_path / "out"
    mnt.mkdir()
    out.mkdir()
    env = {**rig_env(tmp_path), "RIG_RESULTS_ROOT": str(mnt), "MNT": str(mnt), "OUT": str(out)}
    env |= {"RIG": RIG, "EXP": str(exp)}
    proc = subprocess.run(
        ["unshare", "-m", "sh", "-c", RUN_ON_FULL_DISK], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    first_rc, second_rc = int((out / "first.rc").read_text()), int((out / "second.rc").read_text())
    first_err = (out / "first.err").read_text()
    assert first_rc != 0, "the first run should have hit the full disk"
    for line in complete_lines(out / "runs_when_full.jsonl"):
        json.loads(line)
    assert second_rc == 0, (out / "second.err").read_text()[-3000:]
    store = ResultsStore(out / "results")
    runs, quarantine = assert_store_sound(store)
    assert sorted(r["run_id"] for r in runs) == [f"t1_fix_pagination__nothing__r{i:02d}" for i in range(1, 4)]
    assert quarantine == []
    last = first_err.strip().splitlines()[-1]
    assert "Traceback" not in first_err, first_err[-2000:]
    assert last.startswith("error: ") and "No space left on device" in last, last


# --- 3. malformed inputs: one clear line, nothing written ---------------------------------------

SOL = '\n[[conditions]]\nname = "sol"\nharness_options = { policy = "solution" }\n'
BAD_EXPERIMENTS = {
    "syntax": ('harness = "scripted\n' + SOL, "not valid TOML"),
    "unknown_key": ('harness = "scripted"\nworkerz = 2\n' + SOL, "workerz: Extra inputs are not permitted"),
    "wrong_type": (
        'harness = "scripted"\nrepetitions = "two"\n' + SOL,
        "repetitions: Input should be a valid integer",
    ),
    "nested_wrong_type": ('harness = "scripted"\ntimeouts = 5\n' + SOL, "timeouts: Input should be"),
    "unknown_harness": (
        'harness = "nope"\n' + SOL,
        "harness: no harness named 'nope'; use one of scripted, pi",
    ),
    "unknown_task": ('harness = "scripted"\ntasks = ["t9_missing"]\n' + SOL, "unknown task t9_missing"),
    "bad_condition_name": (
        'harness = "scripted"\n[[conditions]]\nname = "with space"\n',
        "conditions.0.name: String should match pattern",
    ),
    "duplicate_conditions": (
        'harness = "scripted"\n' + SOL + SOL,
        "condition names must be unique; repeated: sol",
    ),
    "no_conditions": ('harness = "scripted"\n', "conditions: Field required"),
    "not_utf8": (b'harness = "scripted"\ntitle = "caf\xe9"\n' + SOL.encode(), "not UTF-8"),
    "missing_file": (None, "no such experiment file"),
}


@pytest.mark.parametrize("case", sorted(BAD_EXPERIMENTS))
def test_malformed_experiment_is_one_clear_line_and_writes_nothing(tmp_path, case):
    content, expected = BAD_EXPERIMENTS[case]
    exp = tmp_path / "bad.toml"
    if isinstance(content, bytes):
        exp.write_bytes(content)
    elif content is not None:
        exp.write_text(content)
    results, runs = tmp_path / "results", tmp_path / "runs"
    for root in (results, runs):
        (root / "keep").mkdir(parents=True)
    before = listing(results, runs)
    # The three commands at once: none may write anything, so they cannot disturb each other.
    started = {
        command: subprocess.Popen(
            [RIG, command, str(exp)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=rig_env(tmp_path),
        )
        for command in ("run", "status", "report")
    }
    try:
        done = {command: popen.communicate(timeout=120) for command, popen in started.items()}
    finally:
        for popen in started.values():
            popen.kill()
            popen.wait()
    for command, popen in started.items():
        out, err = done[command]
        proc = subprocess.CompletedProcess(popen.args, popen.returncode, out, err)
        assert is_one_line_error(proc), (command, proc.returncode, proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr and proc.stdout == ""
        if case == "unknown_task" and command == "report":  # report reads results only: there are none
            assert "has no runs.jsonl" in proc.stderr
        else:
            assert expected in proc.stderr, (command, proc.stderr)
            # The task ids are checked against tasks/ after the config itself: that error is the
            # task list's own and does not name the experiment file.
            assert case == "unknown_task" or str(exp) in proc.stderr, (command, proc.stderr)
        assert listing(results, runs) == before, f"rig {command} wrote something"


BAD_TASKS = {
    "syntax": (lambda text: text.replace("=", "", 1), "not valid TOML"),
    "unknown_key": (lambda text: "difficulty = 3\n" + text, "difficulty: Extra inputs are not permitted"),
    "wrong_type": (lambda text: re.sub(r"(?m)^timeout_s = .*$", 'timeout_s = "long"', text), "timeout_s:"),
    "missing_field": (
        lambda text: re.sub(r'(?m)^hypothesis = ".*"$', "", text),
        "hypothesis: Field required",
    ),
    "not_utf8": (lambda text: text.encode() + b"\n# caf\xe9\n", "not UTF-8"),
}


@pytest.mark.parametrize("case", sorted(BAD_TASKS))
def test_malformed_task_toml_is_one_clear_line_before_anything_runs(tmp_path, case):
    from builtin_pack import HIDDEN_TESTS_DIR, TASKS_DIR

    tasks = tmp_path / "tasks"
    shutil.copytree(TASKS_DIR / "t1_fix_pagination", tasks / "t1_fix_pagination")
    toml_path = tasks / "t1_fix_pagination" / "task.toml"
    broken = BAD_TASKS[case][0](toml_path.read_text())
    assert broken != toml_path.read_text()
    if isinstance(broken, bytes):
        toml_path.write_bytes(broken)
    else:
        toml_path.write_text(broken)
    before = listing(tmp_path)
    proc = subprocess.run(
        [RIG, "calibrate", "--tasks-dir", str(tasks), "--hidden-dir", str(HIDDEN_TESTS_DIR)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert is_one_line_error(proc) and proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert str(toml_path) in proc.stderr and BAD_TASKS[case][1] in proc.stderr, proc.stderr
    assert listing(tmp_path) == before


@pytest.mark.parametrize("which", ["runs.jsonl", "quarantine.jsonl"])
def test_corrupt_middle_line_stops_status_report_and_resume_with_one_line(tmp_path, which, calibrated_task):
    exp = write_experiment(
        tmp_path,
        "corrupt",
        [{"name": "nothing", "harness_options": {"policy": "nothing"}}],
        tasks=[calibrated_task],
        repetitions=3,
    )
    root = tmp_path / "results" / "corrupt"
    # The results folder bound to the design, as `rig run` leaves it (`rig status` never writes).
    design = load_experiment(exp)
    root.mkdir(parents=True)
    (root / "experiment.json").write_text(
        json.dumps({"digest": design.digest(), "experiment": design.model_dump(mode="json")})
    )
    store = ResultsStore(root)
    append = store.append_run if which == "runs.jsonl" else store.append_quarantine
    # Whole records, as `rig run` appends them: only the edited line may be what is wrong.
    recorded = json.loads((SMALL_RESULTS / "runs.jsonl").read_text().splitlines()[0])
    for i in (1, 2, 3):
        ids = {"run_id": f"t1_fix_pagination__nothing__r0{i}", "condition": "nothing", "repetition": i}
        append({**recorded, "experiment": "corrupt", **ids})
    lines = (root / which).read_text().splitlines()
    lines[1] = '{"run_id": "t1_fix_pagination__nothing__r02", "success": tr'  # edited by hand
    (root / which).write_text("\n".join(lines) + "\n")
    before = listing(tmp_path / "results", tmp_path / "runs")
    # rig report reads quarantine.jsonl only for the scored runs' cells; here there are none.
    for command in ("status", "report", "run") if which == "runs.jsonl" else ("status", "run"):
        proc = rig(tmp_path, command, str(exp), timeout=120)
        assert proc.returncode != 0, (command, proc.stdout[-1000:])
        assert listing(tmp_path / "results", tmp_path / "runs") == before, f"rig {command} wrote something"
        assert is_one_line_error(proc) and "Traceback" not in proc.stderr, (command, proc.stderr[-2000:])
        assert f"{root / which}: line 2" in proc.stderr and "remove that line" in proc.stderr, proc.stderr


# --- 4. hostile file names and binary files in the diff -----------------------------------------

HOSTILE_NAMES = [
    b"new\nline.txt",
    b"tab\there.txt",
    b'quote"d.txt',
    b'"starts with a quote',
    b"'single'.txt",
    b"-rf",
    b"--help",
    b"-leading dash.txt",
    "ünïcödé-日本語.txt".encode(),
    b"back\\slash.txt",
    b"  spaces  .txt",
    b"\xff\xfe not utf8.txt",
    b"\x1b[31mansi\x7f.txt",
    b"carriage\rreturn",
    b"diff --git a b",
    b"$(touch pwned);`id`.txt",
    b"*glob?[x].txt",
    b"x" * 250,
]


def _write(root: Path, rel: bytes, data: bytes) -> None:
    path = os.path.join(os.fsencode(root), rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def _tree(root: Path) -> dict[bytes, tuple[int, bytes]]:
    """Path -> (mode, content or link target) of everything but .git."""
    base = os.fsencode(root)
    found = {}
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = [d for d in dirnames if d != b".git"]
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            content = os.readlink(path) if stat.S_ISLNK(st.st_mode) else open(path, "rb").read()
            found[os.path.relpath(path, base)] = (stat.S_IFMT(st.st_mode) | (st.st_mode & 0o100), content)
    return found


def _unquote(shown: str) -> bytes:
    """Invert rig.workspace.build.quote_path."""
    if not shown.startswith('"'):
        return shown.encode()
    body, out, i = shown[1:-1], bytearray(), 0
    simple = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}
    while i < len(body):
        c = body[i]
        if c != "\\":
            out += c.encode()
            i += 1
        elif body[i + 1] in simple:
            out.append(simple[body[i + 1]])
            i += 2
        else:
            out.append(int(body[i + 1 : i + 4], 8))
            i += 4
    return bytes(out)


@pytest.mark.slow
def test_hostile_names_and_binary_files_diff_exactly_and_are_named_unambiguously(tmp_path):
    work = copy_fixture(FIXTURE_DIR, tmp_path / "work")
    baseline = init_baseline(work, tmp_path / "rig.git")
    before = _tree(work)
    for i, name in enumerate(HOSTILE_NAMES):
        _write(work, name, b"file %d\n" % i)
    _write(work, b"dir\nwith newline/-rf\tinner", b"nested\n")
    _write(work, "深い/パス/ファイル.md".encode(), "テキスト\n".encode())
    _write(work, b"nul.bin", b"\0\x01\x02binary\0" * 1000)
    _write(work, b"latin1.txt", "café naïve\n".encode("latin-1"))  # text git would diff raw
    _write(work, b"no-newline-at-end.txt", b"no newline")
    _write(work, b"crlf.txt", b"one\r\ntwo\r\n")
    # Attributes the agent writes must not convert what is staged, nor force raw bytes into the diff.
    _write(work, b".gitattributes", b"* text=auto eol=lf\n*.txt diff\n*.bin diff\n")
    _write(work, b"big.bin", random.Random(0).randbytes(20 * 1024 * 1024))
    (work / "README.md").write_bytes((work / "README.md").read_bytes() + b"\xc3\x28 broken utf-8 \xff\n")
    (work / "docs" / "style.md").unlink()
    (work / "scripts" / "check.py").chmod(0o755)
    os.symlink("README.md", work / "link -> readme")
    os.symlink(b"\xff-dangling", os.path.join(os.fsencode(work), b"bad\nlink"))
    after = _tree(work)

    diff, changed = collect_diff(work, tmp_path / "rig.git", baseline)

    # The diff is text (what the runner saves as diff.patch) and reproduces the workspace exactly.
    patch = tmp_path / "diff.patch"
    patch.write_text(diff)
    fresh = copy_fixture(FIXTURE_DIR, tmp_path / "fresh")
    init_baseline(fresh, tmp_path / "fresh.git")
    applied = subprocess.run(
        ["git", "apply", "--whitespace=nowarn", str(patch)], cwd=fresh, capture_output=True, text=True
    )
    assert applied.returncode == 0, applied.stderr[-2000:]
    # A link target that is not UTF-8 has no form in a text patch (git has no binary one for links):
    # it is the one thing left out, and the patch says so.
    assert '# rig: not in this patch: "bad\\nlink", a symlink whose target is not UTF-8\n' in diff
    assert _tree(fresh) == {rel: v for rel, v in after.items() if rel != b"bad\nlink"}
    # Every change is named once, unambiguously, with its status.
    expected = {rel: ("A" if rel not in before else "M") for rel in after if after[rel] != before.get(rel)}
    expected |= {rel: "D" for rel in before if rel not in after}
    shown = {}
    for entry in changed:
        status, _, path = entry.partition(" ")
        assert "\n" not in entry and _unquote(path) not in shown
        shown[_unquote(path)] = status
    assert shown == expected
    assert 'A "new\\nline.txt"' in changed and "A ünïcödé-日本語.txt" in changed
    assert 'A "\\377\\376 not utf8.txt"' in changed and "A -rf" in changed


def test_redaction_of_hostile_names_and_binary_files(tmp_path):
    runs = tmp_path / "runs"
    folder = runs / "attempt"
    secret = str(runs / "work")
    for i, name in enumerate(HOSTILE_NAMES):
        _write(folder, name, b"%d at %s\n" % (i, secret.encode()))
    _write(folder, b"nul.bin", b"\0" + secret.encode() + b"\xff\0")
    _write(folder, b"dir\nwith newline/\xff", b"\xfe" + secret.encode())
    os.symlink(secret, os.path.join(os.fsencode(folder), b"short link"))
    redactor = Redactor.for_machine(runs_root=runs, repo_root=tmp_path / "repo")
    assert redactor.tree(folder) == len(HOSTILE_NAMES) + 3
    for rel, (_mode, content) in _tree(folder).items():
        assert secret.encode() not in content and b"<RUNS>/work" in content, rel
    assert redactor.tree(folder) == 0  # idempotent


def test_redaction_of_a_symlink_with_a_very_long_name(tmp_path):
    runs = tmp_path / "runs"
    (runs / "home").mkdir(parents=True)
    os.symlink(str(runs / "work"), runs / "home" / ("L" * 250))
    redactor = Redactor.for_machine(runs_root=runs, repo_root=tmp_path / "repo")
    assert redactor.tree(runs / "home") == 1
    assert os.readlink(runs / "home" / ("L" * 250)) == "<RUNS>/work"


# --- 5. the model provider down, erroring and stalling, through `rig run` -----------------------
#
# The conformance suite (tests/test_conformance.py, `rig calibrate --harness all`) proves every
# harness classifies every provider fault as infrastructure, through run_one. What is proved here
# is the rest of the pipeline for every real CLI: `rig run` quarantines the attempt, reruns it, and
# scores exactly one record per run, the key in none of the evidence. Each CLI meets one fault, and
# each fault at least one CLI. With `harness_options.mock_faults` the mock is started afresh for
# every attempt (its first_n counts per attempt, so every rerun fails the same way); a transient
# fault therefore needs a server that outlives the attempts: one the test starts, reached as a
# "real" provider at its base_url.

# How each harness reaches a server of the test's own: provider, the URL suffix, a model it accepts.
REAL_PROVIDER = {
    "pi": ({"name": "rig-local"}, "/v1", "local-model"),
    "claude-code": ({"name": "anthropic"}, "", "claude-sonnet-4-5"),
    "codex": ({"name": "openai"}, "/v1", "gpt-5.5"),
    "gemini": ({"name": "google"}, "", "gemini-2.5-pro"),
    "opencode": ({"name": "rig-local"}, "/v1", "local-model"),
}
PROVIDER_RULES = {
    "pi": {"pi_provider_error"},
    "claude-code": {"claude_api_error"},
    "codex": {"codex_http_connection_failed", "codex_internal_server_error"},
    "gemini": {"gemini_api_error"},
    "opencode": {"opencode_provider_error"},
}
TRANSIENT_FAULTS = {
    # (faults of the first request, stall_s, the rules attempt 1 may be quarantined under);
    # server_down: nothing listens on the port until attempt 1 is quarantined.
    "http_529": (Faults(mode="http_error", status=529, first_n=1), 30.0, PROVIDER_RULES),
    "stall_mid_stream": (
        Faults(mode="silence", first_n=1),
        8.0,
        {h: {"stalled_provider"} for h in PROVIDER_RULES},
    ),
    "server_down": (Faults(), 30.0, PROVIDER_RULES),
}
# OpenCode's own retries (which no setting turns off) would recover from one failed request, so
# it meets the stall, which the rig's watchdog ends first.
CASES = [
    ("pi", "server_down"),
    ("claude-code", "http_529"),
    ("codex", "stall_mid_stream"),
    ("gemini", "http_529"),
    ("opencode", "stall_mid_stream"),
]


def test_every_real_cli_and_every_transient_fault_is_in_the_cases():
    assert sorted(h for h, _ in CASES) == sorted(calibrated_names())
    assert {f for _, f in CASES} == set(TRANSIENT_FAULTS)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
@pytest.mark.parametrize(("harness", "fault"), CASES)
def test_transient_provider_fault_is_quarantined_then_rerun_to_one_scored_record(tmp_path, harness, fault):
    """The model server fails the first attempt only: it is quarantined, the rerun is the run's record."""
    faults, stall_s, rules = TRANSIENT_FAULTS[fault]
    (task,) = load_tasks(only=["t1_fix_pagination"])
    provider, suffix, model = REAL_PROVIDER[harness]
    port = free_port()
    server = MockModelServer(
        policy_for(task, {"mock_policy": "solution"}), mock_protocols(), faults=faults, listen_port=port
    )
    exp = write_experiment(
        tmp_path,
        "transient",
        [{"name": "sol"}],
        harness=harness,
        model=model,
        tasks=[task.id],
        provider={
            "kind": "real",
            **provider,
            "base_url": f"http://127.0.0.1:{port}{suffix}",
            "api_key_env": "RIG_FAULT_KEY",
        },
        timeouts={"agent_s": 120, "stall_s": stall_s},
    )
    store = ResultsStore(tmp_path / "results" / "transient")
    # A server down from the start is preflight's to refuse (tests/test_preflight.py); down for the
    # first attempt, it is a transient fault: a bare listener answers preflight's TCP check, and is
    # gone before the agent of attempt 1 connects (its attempt folder exists before the CLI starts).
    gate = socket.create_server(("127.0.0.1", port)) if fault == "server_down" else None
    if gate is None:
        server.start()
    runner = subprocess.Popen(
        [RIG, "run", str(exp)],
        env=rig_env(tmp_path, RIG_FAULT_KEY="fault-test-key"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        if gate is not None:
            deadline = time.monotonic() + 240
            while not list(store.root.glob("runs/*/attempt-1")) and runner.poll() is None:
                assert time.monotonic() < deadline, "attempt 1 never started"
                time.sleep(0.02)
            gate.close()
            while not complete_lines(store.quarantine_path) and runner.poll() is None:
                assert time.monotonic() < deadline, "attempt 1 was never quarantined"
                time.sleep(0.02)
            server.start()
        _out, err = runner.communicate(timeout=600)
    finally:
        runner.kill()
        server.stop()
        if gate is not None:
            gate.close()
    assert runner.returncode == 0, err[-3000:]
    runs, quarantine = assert_store_sound(store)
    (scored,) = runs
    assert scored["success"] and not scored["infra"]["is_infra"], (scored["failing_stage"], scored["infra"])
    # Attempt 1 is quarantined (a slow machine may lose one more attempt to a server still starting).
    assert [r["attempt"] for r in quarantine] == list(range(1, scored["attempt"])) and quarantine
    assert quarantine[0]["infra"]["rule"] in rules[harness], quarantine[0]["infra"]
    assert all(r["infra"]["is_infra"] and r["run_id"] == scored["run_id"] for r in quarantine)
    if fault != "server_down":
        assert scored["attempt"] == 2
        assert server.ledger[0].outcome == faults.mode, server.ledger
        assert all(e.outcome in ("served", "side") for e in server.ledger[1:]), server.ledger
    # The quarantined attempts' evidence stays beside the scored one; the key is in none of it.
    for attempt in range(1, scored["attempt"] + 1):
        folder = store.root / "runs" / scored["run_id"] / f"attempt-{attempt}"
        assert (folder / "record.json").is_file() and (folder / "stdout.log").is_file()
    saved = [p for p in store.root.rglob("*") if p.is_file() and not p.is_symlink()]
    assert not [p for p in saved if b"fault-test-key" in p.read_bytes()], "the API key was saved"
