"""How much does `rig calibrate` cost over the bare floor of the same work?

Two sides run the same calibration items (rig.calibrate.oracle.plan over every task: the clean fixture,
then per task its baseline, reference solution and decoys) with the same number of workers:

* rig:   the real CLI, `.venv/bin/rig calibrate --workers W`, timed by wall clock from outside
         (interpreter start-up, imports, fixture hashing, JSON/junit parsing, clean-up included).
         Its exit code must be 0, or the benchmark stops.
* floor: a ThreadPoolExecutor with W workers doing only what any verification needs per item:
         shutil.copytree of the fixture (caches left behind), plain `git apply` of the item's
         patches, `python scripts/check.py --json`, and, for items with a task, a copy of
         hidden_tests/<task>/ into the workspace plus one `python -m pytest` over it. Nothing
         else: no parsing, no junit, no hashing; deleting the scratch directory is not timed.

Both sides get the same scrubbed environment (rig.confine.proc.scrubbed_env with a temporary HOME).
The machine is shared and noisy, so the sides are interleaved over R rounds (the side that goes
first alternates) and the ratio reported is median(rig) / median(floor). The target is at most
1.3x; the script exits 0 whatever the ratio, since it is a measurement, not a test.

Run it from the repository root:

    .venv/bin/python bench/bench_calibrate.py [--workers W] [--rounds R]

It prints per-round wall-clock seconds, a final ratio line and, as a less noise-prone cross-check,
the CPU seconds (user + system, children included) each side used; it writes everything to
bench/results/calibrate.json (git-ignored).
"""

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from rig import paths
from rig.calibrate.oracle import plan
from rig.confine.proc import scrubbed_env
from rig.packs.manifest import load_pack
from rig.packs.tasks import load_tasks
from rig.schema import Item
from rig.workspace.build import CACHE_NAMES

REPO = paths.REPO_ROOT

TARGET_RATIO = 1.3
RESULTS = REPO / "bench" / "results" / "calibrate.json"
HIDDEN_DEST = "_hidden_tests"


def floor_item(item: Item, fixture: Path, scratch: Path, env: dict[str, str]) -> None:
    """The bare work for one item: copy, patch, check.py, hidden pytest."""
    work = scratch / "work"
    shutil.copytree(fixture, work, ignore=shutil.ignore_patterns(*CACHE_NAMES), symlinks=True)
    for patch in item.patches:
        if patch.stat().st_size:  # `git apply` rejects an empty patch; the rig skips it too
            subprocess.run(
                ["git", "apply", str(patch.resolve())], cwd=work, env=env, check=True, capture_output=True
            )
    subprocess.run([sys.executable, "scripts/check.py", "--json"], cwd=work, env=env, capture_output=True)
    if item.task is not None:
        shutil.copytree(item.task.hidden_dir, work / HIDDEN_DEST)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-p",
                "taskapp_testing.plugin",
                HIDDEN_DEST,
            ],
            cwd=work,
            env=env,
            capture_output=True,
        )


@dataclass
class Sample:
    wall_s: float
    cpu_s: float


def _cpu_s() -> float:
    """User + system CPU of this process and every child it has waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def run_floor(items: list[Item], fixture: Path, workers: int, env: dict[str, str]) -> Sample:
    """The floor over every item; creating and deleting the scratch root is not timed."""
    root = Path(tempfile.mkdtemp(prefix="bench-floor-"))
    try:
        wall, cpu = time.perf_counter(), _cpu_s()
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [
                pool.submit(floor_item, item, fixture, root / f"{i:03d}", env) for i, item in enumerate(items)
            ]
            for future in futures:
                future.result()
        return Sample(time.perf_counter() - wall, _cpu_s() - cpu)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_rig(workers: int, env: dict[str, str]) -> Sample:
    """The real `rig calibrate` CLI, timed from outside; stops the benchmark if it fails."""
    rig = Path(sys.executable).parent / "rig"
    wall, cpu = time.perf_counter(), _cpu_s()
    done = subprocess.run(
        [str(rig), "calibrate", "--workers", str(workers)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    sample = Sample(time.perf_counter() - wall, _cpu_s() - cpu)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-10:])
        raise SystemExit(f"rig calibrate exited {done.returncode}; the benchmark needs it to pass:\n{tail}")
    return sample


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="parallelism of both sides")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (floor and rig each)")
    args = parser.parse_args()
    workers = max(1, args.workers)
    rounds = max(1, args.rounds)

    items = plan(load_tasks())
    fixture = load_pack().fixture_dir
    home = Path(tempfile.mkdtemp(prefix="bench-home-"))
    env = scrubbed_env(home)
    samples: dict[str, list[Sample]] = {"floor": [], "rig": []}
    per_round: list[dict[str, object]] = []
    print(f"bench calibrate: {len(items)} items, workers={workers}, rounds={rounds} (wall s, cpu s)")
    header = ("round", "first", "floor", "rig", "ratio", "cpu floor", "cpu rig")
    print("  ".join(f"{h:>{w}}" for h, w in zip(header, (6, 5, 6, 6, 6, 9, 7), strict=True)))
    try:
        for r in range(rounds):
            order = ("floor", "rig") if r % 2 == 0 else ("rig", "floor")
            got: dict[str, Sample] = {}
            for side in order:
                if side == "floor":
                    got[side] = run_floor(items, fixture, workers, env)
                else:
                    got[side] = run_rig(workers, env)
                samples[side].append(got[side])
            floor, rig = got["floor"], got["rig"]
            ratio = rig.wall_s / floor.wall_s
            per_round.append(
                {
                    "round": r + 1,
                    "first": order[0],
                    "floor_s": round(floor.wall_s, 3),
                    "rig_s": round(rig.wall_s, 3),
                    "ratio": round(ratio, 3),
                    "floor_cpu_s": round(floor.cpu_s, 3),
                    "rig_cpu_s": round(rig.cpu_s, 3),
                }
            )
            print(
                f"{r + 1:>6}  {order[0]:>5}  {floor.wall_s:>6.2f}  {rig.wall_s:>6.2f}  {ratio:>5.2f}x  "
                f"{floor.cpu_s:>9.2f}  {rig.cpu_s:>7.2f}"
            )
    finally:
        shutil.rmtree(home, ignore_errors=True)

    def median(side: str, field: str) -> float:
        return statistics.median(getattr(s, field) for s in samples[side])

    floor_wall, rig_wall = median("floor", "wall_s"), median("rig", "wall_s")
    floor_cpu, rig_cpu = median("floor", "cpu_s"), median("rig", "cpu_s")
    ratio = rig_wall / floor_wall
    cpu_ratio = rig_cpu / floor_cpu
    met = ratio <= TARGET_RATIO
    print(
        f"{'median':>6}  {'':>5}  {floor_wall:>6.2f}  {rig_wall:>6.2f}  {ratio:>5.2f}x  "
        f"{floor_cpu:>9.2f}  {rig_cpu:>7.2f}  (cpu ratio {cpu_ratio:.2f}x)"
    )

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "load_avg_end": [round(x, 2) for x in os.getloadavg()],
        "items": len(items),
        "workers": workers,
        "rounds": per_round,
        "median_floor_s": round(floor_wall, 3),
        "median_rig_s": round(rig_wall, 3),
        "ratio": round(ratio, 3),
        "median_floor_cpu_s": round(floor_cpu, 3),
        "median_rig_cpu_s": round(rig_cpu, 3),
        "cpu_ratio": round(cpu_ratio, 3),
        "target": TARGET_RATIO,
        "target_met": met,
    }
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"calibrate/floor ratio: {ratio:.2f}x (median of {rounds} rounds, workers={workers}, "
        f"{len(items)} items)"
    )
    verdict = "met" if met else "NOT met"
    print(f"target <= {TARGET_RATIO}x: {verdict}; results in {RESULTS.relative_to(REPO)}")


if __name__ == "__main__":
    main()
