"""How does the rig's time per run grow with the number of files an agent leaves in the workspace?

For each size N (default 1k, 10k, 50k and 100k files) and each of two layouts, one run of a
scripted experiment goes through the real pipeline (`rig.runner.make_context` and `execute`, two
temporary roots outside any repository): its agent (policy `script`) creates N empty-ish files,
then stops. The rig's time is the run's wall time (`record["wall_s"]`) minus the agent's own
(`record["agent"]["wall_s"]`): preparing the workspace, the bounded walk and copy for verification,
the diff, protection, check.py, the hidden tests, the record, and removing both trees.

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
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harnesses.base import Condition  # noqa: E402
from rig.experiment import Experiment, Limits, Timeouts  # noqa: E402
from rig.paths import FIXTURE_DIR, REPO_ROOT  # noqa: E402
from rig.runner import execute, experiment_plan, make_context  # noqa: E402
from rig.tasks import load_tasks  # noqa: E402

TASK = "t1_fix_pagination"
MAKE = (
    'python3 -c "import os\nroot = {root!r}\nfor i in range({n}):\n'
    "    d = os.path.join(root, str(i // 500))\n"
    "    os.makedirs(d, exist_ok=True)\n"
    "    open(os.path.join(d, f'f{{i}}.txt'), 'w').write(str(i))\""
)


def one_run(base: Path, layout: str, n: int, index: int) -> dict:
    """Run one scripted run whose agent leaves `n` files; its record."""
    root = "data" if layout == "source" else "node_modules/pkg"
    experiment = Experiment(
        name=f"files-{layout}-{n}-{index}",
        harness="scripted",
        tasks=[TASK],
        conditions=[
            Condition(
                name="files",
                harness_options={"policy": "script", "commands": [MAKE.format(root=root, n=n)]},
            )
        ],
        timeouts=Timeouts(agent_s=1800, stall_s=1800),
        limits=Limits(max_files=2 * n + 10_000),
    )
    tasks = load_tasks(only=[TASK])
    ctx = make_context(experiment, tasks, FIXTURE_DIR, base / "results", base / "runs", REPO_ROOT)
    records: list[dict] = []
    execute(ctx, experiment_plan(ctx), on_update=lambda _p, record: records.append(record))
    (record,) = records
    if record["infra"]["is_infra"] or record["workspace"]["limit"]:
        raise SystemExit(f"bench: run for {layout} {n} did not verify: {record['failing_stage']}")
    return record


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
        for layout in args.layouts.split(","):
            rows = []
            for n in sizes:
                times, agents = [], []
                for index in range(args.rounds):
                    record = one_run(base, layout, n, index)
                    times.append(record["wall_s"] - record["agent"]["wall_s"])
                    agents.append(record["agent"]["wall_s"])
                rig_s, agent_s = statistics.median(times), statistics.median(agents)
                rows.append({"files": n, "rig_s": round(rig_s, 2), "agent_s": round(agent_s, 2)})
                print(f"{layout:>12} {n:>7} files: rig {rig_s:6.2f} s per run (agent {agent_s:.2f} s)")
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
