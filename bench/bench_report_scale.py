"""How long does `rig report` take, and how much memory, on 10,000 and 100,000 scored runs?

For each size the script writes a results folder of realistic records: the 30 records of the
committed small set (tests/data/results_small, a scripted A/B over the five tasks of the built-in
pack), copied with fresh run ids (five tasks x two conditions x N/10 repetitions), verdicts drawn
at 40% and 85% success per condition (a failed copy takes its failing stage, gate and hidden-test
failures from a failed original of the same task), costs, tokens, tool calls and times drawn
around the originals', and the bulk of a real harness's metrics (the shell commands, paths read
and final message of a Pi session), so a record is about as large as a demo record of the Pi
CLI (about 7.5 KB). One run in a hundred also has an infrastructure failure in quarantine.jsonl.
The attempt folders are not written (failures.md then links no receipts).

Then, each as a subprocess of the real CLI, its wall time and peak memory (maximum resident set
size, from os.wait4) measured from outside:

- **cold**: `rig report` with no cache (`runs.cache/` deleted): the first build of the cache;
- **warm**: `rig report` again, twice (the better is reported): what every later report costs;
- **append**: 1% more records appended, then `rig report`: the incremental update of the cache;
- **status**: `rig status` with the cache up to date;
- **old** (with `--baseline REF`): `rig report` of the rig at git commit REF (e.g. the commit
  before the cache), run from a `git archive` of it with the same interpreter.

Run it from the repository root:

    .venv/bin/python bench/bench_report_scale.py [--sizes 10000,100000] [--baseline REF]

It prints one row per size and phase, writes bench/results/report_scale.json (git-ignored), and
exits 0 whatever the figures (targets: 100,000 records warm in at most 5 s and 1 GB).
"""

import argparse
import copy
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SMALL = REPO / "tests" / "data" / "results_small" / "results_small"
CONFIG = REPO / "tests" / "data" / "results_small.toml"
RIG = Path(sys.executable).with_name("rig")
OUT = REPO / "bench" / "results" / "report_scale.json"
# What the old rig needs from its tree to report: its code and the built-in pack it reads.
BASELINE_PATHS = ["rig", "harnesses", "pack.toml", "fixtures", "tasks", "hidden_tests", "pyproject.toml"]
RATES = {"agents_md": 0.85, "no_agents_md": 0.4}


def _templates() -> dict[tuple[str, bool], list[dict]]:
    """The small set's records by (task, success), each any condition."""
    by: dict[tuple[str, bool], list[dict]] = {}
    for line in (SMALL / "runs.jsonl").read_text().splitlines():
        record = json.loads(line)
        by.setdefault((record["task"], record["success"]), []).append(record)
    return by


def _bulk(rng: random.Random, record: dict) -> None:
    """What a Pi session adds to a record's metrics over the scripted agent's: commands, reads, text."""
    files = [f"src/taskapp/{name}.py" for name in ("routes", "services", "schemas", "storage", "app")]
    files += ["README.md", "docs/testing.md", "docs/endpoints.md", "AGENTS.md", "scripts/check.py"]
    commands = [
        "python scripts/check.py",
        "python -m pytest -q tests/unit",
        "grep -rn 'has_next' src/ tests/",
        "sed -n '1,80p' src/taskapp/routes/tasks.py",
        "git diff --stat",
        "ls -la src/taskapp",
        "python -m pytest -p taskapp_testing.plugin tests/contract -q",
        "cat docs/endpoints.md",
    ]
    metrics = record["metrics"]
    metrics["bash_commands"] = [rng.choice(commands) + f"  # step {i}" for i in range(rng.randint(50, 80))]
    metrics["read_paths"] = sorted({rng.choice(files) for _ in range(12)})
    metrics["stop_reasons"] = ["toolUse"] * rng.randint(10, 30) + ["stop"]
    metrics["final_text"] = (
        "I read the task, ran the gate and the unit tests, and changed the code where the bug was. "
        * rng.randint(6, 14)
    )
    metrics["tool_calls_by_name"] = {"bash": rng.randint(5, 30), "read": rng.randint(2, 12)}


def generate(folder: Path, n: int, seed: int = 0) -> None:
    """A results folder of `n` scored records (and a quarantine of about n/100) in `folder`."""
    rng = random.Random(seed)
    templates = _templates()
    tasks = sorted({task for task, _ in templates})
    folder.mkdir(parents=True)
    shutil.copy(SMALL / "experiment.json", folder / "experiment.json")
    reps = -(-n // (len(tasks) * len(RATES)))
    written = 0
    with open(folder / "runs.jsonl", "w") as runs, open(folder / "quarantine.jsonl", "w") as quarantine:
        for rep in range(1, reps + 1):
            for task in tasks:
                for condition, rate in RATES.items():
                    if written == n:
                        return
                    success = rng.random() < rate
                    originals = templates.get((task, success)) or templates[task, True]
                    record = copy.deepcopy(rng.choice(originals))
                    run_id = f"{task}__{condition}__r{rep:05d}"
                    record.update(
                        run_id=run_id,
                        condition=condition,
                        repetition=rep,
                        artifacts=f"runs/{run_id}/attempt-1",
                        wall_s=round(rng.uniform(20, 400), 3),
                    )
                    metrics = record["metrics"]
                    metrics["cost_usd"] = round(rng.lognormvariate(-4, 0.6), 6)
                    metrics["input_tokens"] = rng.randint(5_000, 80_000)
                    metrics["output_tokens"] = rng.randint(500, 8_000)
                    metrics["total_tokens"] = metrics["input_tokens"] + metrics["output_tokens"]
                    metrics["tool_calls"] = rng.randint(3, 40)
                    _bulk(rng, record)
                    if rng.random() < 0.01:
                        lost = {**record, "attempt": 1, "success": False, "failing_stage": None}
                        lost["infra"] = {"is_infra": True, "rule": "no_model_turn", "detail": None}
                        quarantine.write(json.dumps(lost, sort_keys=True, ensure_ascii=False) + "\n")
                        record.update(attempt=2, artifacts=f"runs/{run_id}/attempt-2")
                    runs.write(json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n")
                    written += 1


def append(folder: Path, n: int) -> None:
    """Append `n` copies of the folder's first records with new run ids, as `rig run` would."""
    with open(folder / "runs.jsonl", "rb") as f:
        first = [json.loads(f.readline()) for _ in range(min(n, 1000))]
    with open(folder / "runs.jsonl", "a") as f:
        for i in range(n):
            record = {**first[i % len(first)]}
            record["run_id"] = f"{record['run_id']}__more{i:05d}"
            f.write(json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n")


def measure(command: list[str], env: dict[str, str], cwd: Path | None = None) -> dict[str, float]:
    """Wall seconds, CPU seconds (user and system) and peak resident memory (MB) of one subprocess,
    which must exit 0, and the machine's load average when it started (on a shared machine the
    wall time grows with the load, the CPU time much less)."""
    load = os.getloadavg()[0]
    started = time.perf_counter()
    proc = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    error = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"bench: {' '.join(command)} exited {proc.returncode}: {error}")
    # Linux reports ru_maxrss in KiB.
    return {
        "seconds": round(seconds, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "peak_mb": round(usage.ru_maxrss / 1024, 1),
        "load": round(load, 1),
    }


def baseline_tree(ref: str, dest: Path) -> Path:
    """The files of the rig at git commit `ref` that `rig report` needs, unpacked into `dest`."""
    archive = dest / "baseline.tar"
    with open(archive, "wb") as f:
        subprocess.run(["git", "archive", ref, *BASELINE_PATHS], cwd=REPO, stdout=f, check=True)
    tree = dest / "baseline"
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    return tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--baseline", help="a git commit of the rig before the cache, to compare with")
    args = parser.parse_args()
    results: dict[str, dict] = {"machine": f"{platform.python_version()}, {os.cpu_count()} cores"}
    with tempfile.TemporaryDirectory(prefix="rig-bench-report-") as tmp:
        base = Path(tmp)
        env = {**os.environ, "RIG_RESULTS_ROOT": str(base / "results"), "RIG_RUNS_ROOT": str(base / "runs")}
        env.pop("RIG_RUNS_CACHE", None)
        old = baseline_tree(args.baseline, base) if args.baseline else None
        for n in (int(s) for s in args.sizes.split(",")):
            folder = base / "results" / "results_small"
            shutil.rmtree(folder, ignore_errors=True)
            generate(folder, n)
            size_mb = (folder / "runs.jsonl").stat().st_size / 1e6
            report = [str(RIG), "report", str(CONFIG), "--out", str(base / "out")]
            row: dict[str, object] = {"records": n, "runs_jsonl_mb": round(size_mb, 1)}
            if old is not None:
                script = "import sys; from rig.cli import app; sys.argv[0] = 'rig'; app()"
                old_env = {**env, "PYTHONPATH": str(old)}
                row["old"] = measure([sys.executable, "-c", script, *report[1:]], old_env, cwd=old)
            shutil.rmtree(folder / "runs.cache", ignore_errors=True)
            row["cold"] = measure(report, env)
            row["warm"] = min((measure(report, env) for _ in range(2)), key=lambda m: m["seconds"])
            append(folder, n // 100)
            row["append"] = measure(report, env)
            row["status"] = measure([str(RIG), "status", str(CONFIG)], env)
            results[str(n)] = row
            phases = ", ".join(
                f"{phase} {row[phase]['seconds']} s (cpu {row[phase]['cpu_s']} s, load {row[phase]['load']}) "  # type: ignore[index]
                f"/ {row[phase]['peak_mb']} MB"  # type: ignore[index]
                for phase in ("old", "cold", "warm", "append", "status")
                if phase in row
            )
            print(f"{n} records ({size_mb:.0f} MB): {phases}", flush=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(results, indent=2) + "\n")
    print(f"written: {OUT}")


if __name__ == "__main__":
    main()
