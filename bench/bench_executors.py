"""What does running on Dask cost per run, next to the local executor, on the same experiment?

Three sides run the same scripted experiment (every task of the built-in pack, two conditions,
the policy "solution", `--reps` repetitions: real workspaces, gates and hidden tests) with two
agents at a time, each through `rig run` as a user would:

* local:      `rig run EXP` (the experiment's two worker threads);
* dask-local: `rig run EXP --executor dask-local --workers 2` (the LocalCluster it starts is
              part of what is timed);
* cluster:    `rig run EXP --executor dask --scheduler ...` on a scheduler and two worker processes
              started here once with the `dask` command-line tools on loopback (`--resources
              agents=1`), kept up across rounds, as a user's cluster would be.

The machine is shared and noisy, so the sides are interleaved over R rounds (the order rotates),
each in fresh results and runs folders. The per-run figure of a side in a round is its wall time
divided by its runs; the reported ratios are median(dask side) / median(local) over the rounds.
The target is at most 1.2x. It exits 0 whatever the ratios: a measurement, not a test.

Run it from the repository root:

    .venv/bin/python bench/bench_executors.py [--rounds R] [--reps N]

It writes bench/results/executors.json (git-ignored).
"""

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SIDES = ("local", "dask-local", "cluster")


def experiment(folder: Path, reps: int) -> Path:
    path = folder / "bench_executors.toml"
    path.write_text(
        f'harness = "scripted"\ntasks = "all"\nrepetitions = {reps}\nworkers = 2\nseed = 1\n\n'
        '[[conditions]]\nname = "agents_md"\nharness_options = { policy = "solution" }\n\n'
        '[[conditions]]\nname = "no_agents_md"\nremove_files = ["AGENTS.md"]\n'
        'harness_options = { policy = "solution" }\n'
    )
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_cluster(scratch: Path) -> tuple[str, list[subprocess.Popen]]:
    """A scheduler and two workers (one agent each) on loopback; their address and processes."""
    address = f"tcp://127.0.0.1:{free_port()}"
    dask = str(BIN / "dask")
    log = (scratch / "cluster.log").open("w")
    common = {"stdout": log, "stderr": subprocess.STDOUT, "start_new_session": True}
    port = address.rsplit(":", 1)[1]
    procs = [
        subprocess.Popen(
            [dask, "scheduler", "--host", "127.0.0.1", "--port", port, "--no-dashboard"], **common
        )
    ]
    for name in ("w1", "w2"):
        env = {**os.environ, "RIG_RUNS_ROOT": str(scratch / f"runs-{name}")}
        command = [dask, "worker", address, "--name", name, "--nthreads", "1", "--resources", "agents=1"]
        procs.append(
            subprocess.Popen(
                [*command, "--no-nanny", "--host", "127.0.0.1", "--no-dashboard"], env=env, **common
            )
        )
    from distributed import Client

    with Client(address, timeout=60) as client:
        deadline = time.monotonic() + 120
        while len(client.scheduler_info()["workers"]) < 2:
            if time.monotonic() > deadline:
                raise SystemExit(f"the bench cluster did not start; see {scratch / 'cluster.log'}")
            time.sleep(0.5)
    return address, procs


def run_side(side: str, exp: Path, folder: Path, address: str) -> tuple[float, int]:
    """Wall seconds of `rig run` on `side` in fresh folders, and the runs it recorded."""
    args = {"local": [], "dask-local": ["--executor", "dask-local", "--workers", "2"]}.get(
        side, ["--executor", "dask", "--scheduler", address]
    )
    env = {**os.environ, "RIG_RESULTS_ROOT": str(folder / "results"), "RIG_RUNS_ROOT": str(folder / "runs")}
    start = time.monotonic()
    proc = subprocess.run([str(BIN / "rig"), "run", str(exp), *args], env=env, capture_output=True, text=True)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"{side}: rig run failed: {proc.stderr.strip().splitlines()[-1:]}")
    runs = (folder / "results" / exp.stem / "runs.jsonl").read_text().splitlines()
    if not all(json.loads(line)["success"] for line in runs):
        raise SystemExit(f"{side}: a run did not succeed; the bench measures complete runs only")
    return wall, len(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="rig-bench-executors-"))
    address, procs = start_cluster(scratch)
    per_run: dict[str, list[float]] = {side: [] for side in SIDES}
    try:
        exp = experiment(scratch, args.reps)
        for round_number in range(args.rounds):
            order = SIDES[round_number % 3 :] + SIDES[: round_number % 3]
            line = []
            for side in order:
                folder = scratch / f"r{round_number}-{side}"
                wall, runs = run_side(side, exp, folder, address)
                per_run[side].append(wall / runs)
                line.append(f"{side} {wall / runs:.2f}s/run ({runs} runs)")
                shutil.rmtree(folder, ignore_errors=True)
            print(f"round {round_number + 1}: " + ", ".join(line), flush=True)
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(scratch, ignore_errors=True)
    medians = {side: statistics.median(values) for side, values in per_run.items()}
    ratios = {side: medians[side] / medians["local"] for side in SIDES[1:]}
    for side, ratio in ratios.items():
        print(f"{side} / local: {ratio:.2f}x per run (target at most 1.2x)")
    out = ROOT / "bench" / "results" / "executors.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps({"seconds_per_run": per_run, "medians": medians, "ratios": ratios}, indent=2) + "\n"
    )


if __name__ == "__main__":
    main()
