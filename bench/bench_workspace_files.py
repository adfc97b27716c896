"""How does the rig's time per run grow with the number of files an agent leaves in the workspace?

For each size N (default 1k, 10k, 50k and 100k files) and each of two layouts, one run of a
scripted experiment goes through the real pipeline (`rig.run.runner.make_context` and `execute`, two
temporary roots outside any repository): its agent (policy `script`) creates N empty-ish files,
then stops. The rig's time is the run's wall time (`record["wall_s"]`) minus the agent's own
(`record["agent"]["wall_s"]`): preparing the workspace, the bounded walk and copy for verification
(which stages the files for the diff in the same pass), the diff, protection, check.py, the hidden
tests and the record.

The verification copy goes where it goes by default on this machine (rig.workspace.scratch: a private
directory on /dev/shm when that is a tmpfs with room, else the runs root). The run keeps its trees
(`keep_workspaces`, with `$RIG_VERIFY_ROOT` naming that default place so that keeping does not
move the copy), so that right after it, on the very files the agent left and in the same state of
the page cache, the script times the floor, `cp -a` of the agent's workspace to the same place
(the one copy the rig cannot avoid: verification runs in a directory the agent never saw), and
then the rig's own removal of the workspace and its copy (`cleanup`, which a run does after its
record is written). This disk's speed varies several-fold within minutes, so the ratio of the
rig's time to that floor is the figure to compare across machines and moments.

- `source`: N files in directories of 500 under `data/`: the worst case, every file is copied,
  staged and diffed.
- `node_modules`: N files under `node_modules/` (what `npm install` leaves): counted towards the
  limits but neither copied nor diffed.

`[limits] max_files` is raised above N so that no run stops at the limit. The script prints, per
layout, the rig seconds per size, the least-squares slope in seconds per 10,000 files and the
ratio of the largest size's time to the slope's prediction (near 1 means linear growth). The
machine is shared and noisy: each size runs `--rounds` times and the median is reported. Results
go to bench/results/workspace_files.json (git-ignored). A measurement, not a test: exit 0.

    .venv/bin/python bench/bench_workspace_files.py [--sizes 1000,10000,50000,100000] [--rounds 1]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rig.confine.untrusted import remove_trees  # noqa: E402
from rig.packs.tasks import load_tasks  # noqa: E402
from rig.paths import REPO_ROOT  # noqa: E402
from rig.run.runner import execute, experiment_plan, make_context  # noqa: E402
from rig.schema import Condition, Experiment, Limits, Timeouts  # noqa: E402
from rig.workspace.scratch import VERIFY_ROOT_VAR, choose_scratch  # noqa: E402

TASK = "t1_fix_pagination"
# The agent's program (no double quote: it goes into a shell command between them).
MAKE = (
    "import os\nroot = {root!r}\nfor i in range({n}):\n"
    "    d = os.path.join(root, str(i // 500))\n"
    "    os.makedirs(d, exist_ok=True)\n"
    "    open(os.path.join(d, f'f{{i}}.txt'), 'w').write(str(i))"
)


def one_run(base: Path, layout: str, n: int, index: int) -> dict[str, float]:
    """Run one scripted run whose agent leaves `n` files; seconds of rig, agent, floor and cleanup."""
    root = "data" if layout == "source" else "node_modules/pkg"
    experiment = Experiment(
        name=f"files-{layout}-{n}-{index}",
        harness="scripted",
        tasks=[TASK],
        conditions=[
            Condition(
                name="files",
                harness_options={
                    "policy": "script",
                    "commands": [f'python3 -c "{MAKE.format(root=root, n=n)}"'],
                },
            )
        ],
        timeouts=Timeouts(agent_s=1800, stall_s=1800),
        limits=Limits(max_files=2 * n + 10_000),
    )
    tasks = load_tasks(only=[TASK])
    runs = base / "runs"
    ctx = make_context(experiment, tasks, base / "results", runs, REPO_ROOT, keep_workspaces=True)
    records: list[dict] = []
    execute(ctx, experiment_plan(ctx), on_update=lambda _p, record: records.append(record))
    (record,) = records
    if record["infra"]["is_infra"] or record["workspace"]["limit"]:
        raise SystemExit(f"bench: run for {layout} {n} did not verify: {record['failing_stage']}")
    (container,) = sorted((runs / experiment.name).iterdir())
    (copy,) = sorted(ctx.scratch.folder.iterdir())
    floor_dir = ctx.scratch.folder / "floor"
    started = time.perf_counter()
    subprocess.run(["cp", "-a", str(container / "work"), str(floor_dir)], check=True)
    floor = time.perf_counter() - started
    started = time.perf_counter()
    problems = remove_trees([container, copy])
    cleanup = time.perf_counter() - started
    remove_trees([floor_dir, ctx.scratch.folder])
    if any(problems):
        raise SystemExit(f"bench: cleanup failed: {problems}")
    return {
        "rig": record["wall_s"] - record["agent"]["wall_s"],
        "agent": record["agent"]["wall_s"],
        "floor": floor,
        "cleanup": cleanup,
    }


def slope(sizes: list[int], seconds: list[float]) -> tuple[float, float]:
    """Least-squares (intercept, seconds per file)."""
    mean_n, mean_s = statistics.fmean(sizes), statistics.fmean(seconds)
    num = sum((n - mean_n) * (s - mean_s) for n, s in zip(sizes, seconds, strict=True))
    den = sum((n - mean_n) ** 2 for n in sizes)
    per_file = num / den
    return mean_s - per_file * mean_n, per_file


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,50000,100000")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--layouts", default="source,node_modules")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="rig-bench-files-") as tmp:
        base = Path(tmp)
        place = choose_scratch(base / "runs" / "bench", base / "results" / "bench", workers=1)
        os.environ[VERIFY_ROOT_VAR] = str(place.folder.parent)
        print(f"verification copies: {place.folder.parent}, {place.note}")
        for layout in args.layouts.split(","):
            rows = []
            for n in sizes:
                runs = [one_run(base, layout, n, index) for index in range(args.rounds)]
                row: dict[str, float] = {"files": n}
                for key in ("rig", "floor", "cleanup", "agent"):
                    row[f"{key}_s"] = round(statistics.median(r[key] for r in runs), 2)
                row["rig_over_floor"] = round(statistics.median(r["rig"] / r["floor"] for r in runs), 2)
                rows.append(row)
                rig_s, ratio, floor_s = row["rig_s"], row["rig_over_floor"], row["floor_s"]
                print(
                    f"{layout:>12} {n:>7} files: rig {rig_s:6.2f} s per run = {ratio:.2f}x cp -a of the "
                    f"same workspace ({floor_s:.2f} s); cleanup {row['cleanup_s']:.2f} s, "
                    f"agent {row['agent_s']:.2f} s"
                )
            intercept, per_file = slope([r["files"] for r in rows], [r["rig_s"] for r in rows])
            largest = rows[-1]
            predicted = intercept + per_file * largest["files"]
            results[layout] = {
                "rows": rows,
                "intercept_s": round(intercept, 3),
                "s_per_10k_files": round(per_file * 10_000, 3),
                "largest_over_linear": round(largest["rig_s"] / predicted, 3),
            }
            print(
                f"{layout:>12} slope: {per_file * 10_000:.2f} s per 10,000 files "
                f"(intercept {intercept:.2f} s); "
                f"{largest['files']} files: {largest['rig_s']:.2f} s = {largest['rig_s'] / predicted:.2f}x "
                "the linear fit"
            )
    out = REPO / "bench" / "results" / "workspace_files.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"written: {out}")


if __name__ == "__main__":
    main()
