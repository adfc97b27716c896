"""`rig run --executor dask-local` and `--executor dask`: the same experiment on Dask distributed.

Real clusters: a LocalCluster the rig starts, and a scheduler with worker processes started here
with the `dask` command-line tools on loopback, one of them killed in the middle of a run. Records
must equal the local executor's (times, hosts and workers aside), every run recorded exactly once,
a lost attempt quarantined as `worker_lost`, and a worker whose pins differ refused by name.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rig.paths import REPO_ROOT

BIN = Path(sys.executable).parent
RIG = str(BIN / "rig")
DASK = str(BIN / "dask")
TASKS = '["t1_fix_pagination"]'
# What differs between two runs of the same plan item, whoever runs it.
VOLATILE = {"started_at", "finished_at", "wall_s", "worker"}


def experiment(tmp_path: Path, name: str, policy: str = 'policy = "solution"', repetitions: int = 1) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(
        f'harness = "scripted"\ntasks = {TASKS}\nrepetitions = {repetitions}\nworkers = 2\nseed = 7\n'
        "max_attempts = 3\nmax_consecutive_infra = 5\n\n"
        f'[[conditions]]\nname = "agents_md"\nharness_options = {{ {policy} }}\n\n'
        f'[[conditions]]\nname = "no_agents_md"\nremove_files = ["AGENTS.md"]\n'
        f"harness_options = {{ {policy} }}\n"
    )
    return path


def env(tmp_path: Path, runs: str = "runs") -> dict[str, str]:
    return {
        **os.environ,
        "RIG_RESULTS_ROOT": str(tmp_path / "results"),
        "RIG_RUNS_ROOT": str(tmp_path / runs),
    }


def rig_run(tmp_path: Path, exp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RIG, "run", str(exp), *args], env=env(tmp_path), capture_output=True, text=True, timeout=600
    )


def records(tmp_path: Path, name: str, kind: str = "runs") -> list[dict]:
    path = tmp_path / "results" / name / f"{kind}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def comparable(record: dict) -> dict:
    """A record without what differs between two runs of the same item wherever they run: times,
    the worker, the baseline commit (committed at the run's time), the agent's own timing, how many
    of its processes were still alive when it ended (a race with their exit), and the sizes of its
    raw output, which holds the paths of the machine it ran on (the output itself is redacted)."""
    out = {k: v for k, v in record.items() if k not in VOLATILE}
    out["pins"] = {k: v for k, v in record["pins"].items() if k != "baseline_commit"}
    out["agent"] = {
        k: v for k, v in record["agent"].items() if k not in ("wall_s", "leftover_processes", "streams")
    }
    return out


def differences(a: object, b: object, at: str = "") -> list[str]:
    """Where two records differ, as dotted paths with both values."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in differences(a.get(k), b.get(k), f"{at}.{k}")]
    return [] if a == b else [f"{at}: {a!r} != {b!r}"]


def test_dask_local_records_equal_the_local_executors(tmp_path):
    local, dask = tmp_path / "l", tmp_path / "d"
    for where, args in ((local, ()), (dask, ("--executor", "dask-local", "--workers", "2"))):
        where.mkdir()
        proc = rig_run(where, experiment(where, "same"), *args)
        assert proc.returncode == 0, proc.stderr
    if_local = {r["run_id"]: r for r in records(local, "same")}
    on_dask = {r["run_id"]: r for r in records(dask, "same")}
    assert len(on_dask) == 2 and set(on_dask) == set(if_local)
    for run_id, record in on_dask.items():
        mine, theirs = comparable(record), comparable(if_local[run_id])
        assert mine == theirs, (run_id, differences(mine, theirs))
        assert record["worker"] and if_local[run_id]["worker"] is None
        # The attempt folder came back from the worker: its artifacts are here, its record names it.
        folder = dask / "results" / "same" / record["artifacts"]
        assert (folder / "diff.patch").is_file() and (folder / "session.jsonl").is_file()
        assert json.loads((folder / "record.json").read_text())["worker"] == record["worker"]
    # Nothing of a worker's own paths reaches the results.
    text = (dask / "results" / "same" / "runs.jsonl").read_text()
    assert "rig-worker-results" not in text and str(tmp_path) not in text
    # Resumed, there is nothing left to run: the records say what was done wherever it ran.
    again = rig_run(dask, experiment(dask, "same"), "--executor", "dask-local", "--workers", "1")
    assert again.returncode == 0 and "0 to run" in again.stderr, again.stderr


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


class Cluster:
    """A Dask scheduler and workers, as `dask scheduler` and `dask worker` processes on loopback."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.address = f"tcp://127.0.0.1:{_free_port()}"
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs = tmp_path / "dask-logs"
        self.logs.mkdir()
        self._start(
            "scheduler",
            [
                DASK,
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                self.address.rsplit(":", 1)[1],
                "--no-dashboard",
            ],
            dict(os.environ),
        )

    def _start(
        self, name: str, command: list[str], environment: dict[str, str], cwd: Path | None = None
    ) -> None:
        log = (self.logs / f"{name}.log").open("w")
        self.procs[name] = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=environment, cwd=cwd, start_new_session=True
        )

    def worker(self, name: str, pythonpath: Path | None = None) -> None:
        """A worker named `name`, its runs under runs-<name>; rig imported from `pythonpath` if given."""
        environment = {**env(self.tmp_path, f"runs-{name}")}
        if pythonpath is not None:
            environment["PYTHONPATH"] = str(pythonpath)
        command = [
            DASK,
            "worker",
            self.address,
            "--name",
            name,
            "--nthreads",
            "1",
            "--resources",
            "agents=1",
            "--no-nanny",
            "--host",
            "127.0.0.1",
            "--no-dashboard",
        ]
        self._start(name, command, environment, pythonpath)

    def wait_for_workers(self, n: int) -> None:
        from distributed import Client

        with Client(self.address, timeout=30) as client:
            _wait_for(lambda: len(client.scheduler_info()["workers"]) >= n, 60, f"{n} dask workers")

    def kill(self, name: str) -> None:
        os.killpg(self.procs[name].pid, signal.SIGKILL)
        self.procs[name].wait()

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture
def cluster(tmp_path):
    made = Cluster(tmp_path)
    try:
        yield made
    finally:
        made.close()


@pytest.mark.slow
def test_a_worker_killed_mid_run_is_worker_lost_and_every_run_is_recorded_once(tmp_path, cluster):
    cluster.worker("a")
    cluster.worker("b")
    cluster.wait_for_workers(2)
    exp = experiment(tmp_path, "lost", 'policy = "sleep", seconds = 3')
    run = subprocess.Popen(
        [RIG, "run", str(exp), "--executor", "dask", "--scheduler", cluster.address],
        env=env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # A worker's first workspace means it is running an agent: kill it there, with kill -9.
        def busy() -> list[str]:
            return [w for w in ("a", "b") if any((tmp_path / f"runs-{w}").glob("lost/*"))]

        _wait_for(busy, 120, "a run on a worker")
        cluster.kill(busy()[0])
        out, err = run.communicate(timeout=600)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, err
    runs = records(tmp_path, "lost")
    assert sorted(r["run_id"] for r in runs) == sorted({r["run_id"] for r in runs}) and len(runs) == 2
    lost = [r for r in records(tmp_path, "lost", "quarantine") if r["infra"]["rule"] == "worker_lost"]
    assert len(lost) >= 1, records(tmp_path, "lost", "quarantine")
    assert all(r["infra"]["is_infra"] and not r["success"] for r in lost)
    # The lost attempt was rerun: its run id has a scored record with a later attempt.
    rerun = {r["run_id"]: r for r in runs}
    for record in lost:
        assert rerun[record["run_id"]]["attempt"] > record["attempt"]


def _checkout_with_changed_fixture(tmp_path: Path) -> Path:
    """A copy of the rig's code and built-in pack whose fixture differs by one line."""
    copy = tmp_path / "other-rig"
    copy.mkdir()
    for name in ("rig", "harnesses", "fixtures", "tasks", "hidden_tests", "pack.toml", "pyproject.toml"):
        source = REPO_ROOT / name
        if source.is_dir():
            shutil.copytree(
                source,
                copy / name,
                symlinks=True,
                ignore=shutil.ignore_patterns("node_modules", "__pycache__"),
            )
        else:
            shutil.copy2(source, copy / name)
    readme = copy / "fixtures" / "taskapp" / "README.md"
    readme.write_text(
        readme.read_text() + "\nA line this worker's fixture has and the coordinator's has not.\n"
    )
    return copy


@pytest.mark.slow
def test_a_worker_whose_fixture_differs_is_refused_by_name(tmp_path, cluster):
    cluster.worker("good")
    cluster.worker("odd", pythonpath=_checkout_with_changed_fixture(tmp_path))
    cluster.wait_for_workers(2)
    exp = experiment(tmp_path, "pins")
    proc = rig_run(tmp_path, exp, "--executor", "dask", "--scheduler", cluster.address)
    assert proc.returncode == 0, proc.stderr
    # The cluster's records are the local executor's, whoever ran them.
    local = tmp_path / "l"
    local.mkdir()
    assert rig_run(local, experiment(local, "pins")).returncode == 0
    if_local = {r["run_id"]: comparable(r) for r in records(local, "pins")}
    for record in records(tmp_path, "pins"):
        mine = comparable(record)
        assert mine == if_local[record["run_id"]], differences(mine, if_local[record["run_id"]])
    refusal = [line for line in proc.stderr.splitlines() if "refused" in line]
    assert len(refusal) == 1 and "fixture_hash of t1_fix_pagination is" in refusal[0], proc.stderr
    assert "on the coordinator" in refusal[0]
    # Every run ran on the worker that matches.
    workers = {r["worker"] for r in records(tmp_path, "pins")}
    assert len(workers) == 1 and len(records(tmp_path, "pins")) == 2
    cluster.procs["odd"].wait(timeout=30)  # retired: the refused worker was closed


def test_bad_executor_options_are_one_line(tmp_path):
    exp = experiment(tmp_path, "opts")
    for args, message in (
        (("--executor", "spark"), "unknown executor 'spark'; use local, dask-local or dask"),
        (("--executor", "dask"), "--scheduler goes with --executor dask"),
        (("--scheduler", "tcp://127.0.0.1:1"), "--scheduler goes with --executor dask"),
        (("--workers", "3"), "--workers goes with --executor dask-local"),
    ):
        proc = rig_run(tmp_path, exp, *args)
        assert proc.returncode == 2 and message in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    proc = rig_run(tmp_path, exp, "--executor", "dask", "--scheduler", f"tcp://127.0.0.1:{_free_port()}")
    assert proc.returncode == 2 and "cannot reach the Dask scheduler" in proc.stderr, proc.stderr


def _agents_under(root: Path) -> list[int]:
    """Scripted agents whose working directory is below `root` (wherever their worker runs them)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if b"scripted/agent.py" in cmdline and cwd.startswith(str(root)):
            found.append(int(entry.name))
    return found


def test_ctrl_c_on_dask_local_kills_the_agents_on_its_workers(tmp_path):
    exp = experiment(tmp_path, "stop", 'policy = "sleep", seconds = 300')
    proc = subprocess.Popen(
        [RIG, "run", str(exp), "--executor", "dask-local", "--workers", "1"],
        env=env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(lambda: _agents_under(tmp_path / "runs"), 120, "an agent on the worker")
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted; running agents were killed" in err
    _wait_for(lambda: not _agents_under(tmp_path / "runs"), 10, "the agents to be gone")
    assert records(tmp_path, "stop") == []
