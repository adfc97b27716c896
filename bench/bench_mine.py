"""How long does `rig task mine` take over 200 commits of a small real project, and what does it yield
(issue #36, item 7)?

Through the real CLI as a user runs it: a fresh copy of PACK (a pack made by `rig pack new` from
REPO, with whatever edits it needed, and no tasks yet), then

    rig task mine REPO --pack COPY --max N -w W --json

timed by wall clock from outside, with the CPU it used (user + system, children included). The
pack's environment is built before the clock starts (`rig env build`), as a user's first
`rig calibrate` would have, so the figure is mining's own. Beside it, in the same run and on the
same machine, the gate once on the clean fixture (the pack's own verification of it, as mining
does first): mining's wall time in gate runs is a figure another machine can compare, where
seconds depend on the machine.

Reported: the wall clock and CPU, the time per commit read and per candidate (commits past
"with source and tests"), the funnel as `rig task mine` prints it, the yield (kept / read), how
many tasks start at their fix's parent, and per verdict the commits and the seconds measuring
them took (each commit's `seconds` in the report): where the time went; each measured commit's
verdict, base, seconds and reason; and how many calibration items were judged on the
measurements. Target: N = 200 in at most 10 minutes on 2 cores.

It is a measurement, not a test: it exits 0 whatever the figures (1 if rig itself fails, with the
command and its output's tail). From the repository root:

    .venv/bin/python bench/bench_mine.py REPO PACK [--max N] [--workers W]   # defaults: 200, 2

It writes bench/results/mine.json (git-ignored). Ctrl-C stops the command in flight, removes the
copy and exits 130.
"""

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RIG = str(ROOT / ".venv" / "bin" / "rig")
RESULTS = ROOT / "bench" / "results"
TARGET_S = 600.0
TAIL = 2000


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(cmd: list[str]) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """Run `cmd`; its wall clock, its CPU and the process. Exit 1 when it fails."""
    cpu, start = _children_cpu(), time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        print(f"failed ({proc.returncode}): {' '.join(cmd)}\n{(proc.stdout + proc.stderr)[-TAIL:]}")
        sys.exit(1)
    return wall, _children_cpu() - cpu, proc


def _gate_once(pack: Path, scratch: Path) -> float:
    """Wall clock of the pack's verification of its clean fixture (the gate), in its environment."""
    from rig.calibrate.oracle import verify_patches
    from rig.env.activate import activate
    from rig.packs.manifest import load_pack

    loaded = load_pack(pack)
    env = activate(loaded)
    start = time.monotonic()
    (clean,) = verify_patches(loaded, [], None, scratch, project_env=env)
    wall = time.monotonic() - start
    if not clean.check.ok:
        print(f"{pack}: the clean fixture fails its gate ({clean.check.failed}); fix the pack first")
        sys.exit(1)
    return wall


def _by_verdict(commits: list[dict]) -> dict[str, dict[str, float]]:
    """Per verdict, how many commits got it and the seconds measuring them took (summed over the
    workers), the costliest first: where mining's time went."""
    totals: dict[str, dict[str, float]] = {}
    for entry in commits:
        verdict = totals.setdefault(entry["verdict"], {"commits": 0, "seconds": 0.0})
        verdict["commits"] += 1
        verdict["seconds"] = round(verdict["seconds"] + entry.get("seconds", 0.0), 1)
    return dict(sorted(totals.items(), key=lambda item: -item[1]["seconds"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repo", type=Path, help="the git repository the pack was made from")
    parser.add_argument("pack", type=Path, help="a pack made by `rig pack new` from it, with no task yet")
    parser.add_argument("--max", type=int, default=200, help="commits to read, newest first")
    parser.add_argument("--workers", type=int, default=2, help="commits measured in parallel")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="rig-bench-mine-"))
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        pack = scratch / "pack"
        shutil.copytree(args.pack, pack, symlinks=True)
        for folder in ("tasks", "hidden_tests"):
            if any((pack / folder).iterdir()):
                print(f"{args.pack}/{folder} is not empty: give a pack with no task yet")
                sys.exit(1)
        if "[environment]" in (pack / "pack.toml").read_text():
            _timed([RIG, "env", "build", str(pack)])
        gate_wall = _gate_once(pack, scratch / "gate")
        cmd = [RIG, "task", "mine", str(args.repo), "--pack", str(pack), "--max", str(args.max)]
        wall, cpu, proc = _timed([*cmd, "-w", str(args.workers), "--json"])
        report = json.loads(proc.stdout)
    except KeyboardInterrupt:
        print("interrupted")
        sys.exit(130)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    funnel = report["funnel"]
    candidates = funnel["changes"]
    result = {
        "repo": str(args.repo),
        "snapshot": report["snapshot"],
        "max": args.max,
        "workers": args.workers,
        "cores": os.cpu_count(),
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "per_commit_s": round(wall / max(1, funnel["read"]), 2),
        "per_candidate_s": round(wall / candidates, 1) if candidates else None,
        "gate_once_s": round(gate_wall, 1),
        "in_gate_runs": round(wall / gate_wall, 1),
        "funnel": funnel,
        "seconds_by_verdict": _by_verdict(report["commits"]),
        "calibration_reused": report.get("calibration_reused", 0),
        "calibration_afresh": report.get("calibration_afresh", 0),
        # What each measured commit cost and why it ended there, for the next saving to aim at.
        "measured": [
            {key: entry.get(key) for key in ("commit", "verdict", "base", "seconds", "reason")}
            for entry in report["commits"]
            if entry.get("seconds")
        ],
        "yield": round(funnel["kept"] / max(1, funnel["read"]), 3),
        "target_s": TARGET_S,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "mine.json").write_text(json.dumps(result, indent=2) + "\n")
    stages = " > ".join(f"{n} {stage}" for stage, n in funnel.items() if stage != "at_parent")
    print(f"funnel: {stages} ({funnel['at_parent']} at their parent)")
    spent = ", ".join(
        f"{verdict} {v['commits']:.0f} ({v['seconds']:.0f} s)"
        for verdict, v in result["seconds_by_verdict"].items()
    )
    print(f"measuring time by verdict (summed over workers): {spent}")
    print(
        f"mined {funnel['kept']} of {funnel['read']} commits (yield {result['yield']:.1%}) "
        f"in {wall:.0f} s wall, {cpu:.0f} s CPU, {args.workers} workers on {os.cpu_count()} cores: "
        f"{result['per_commit_s']} s per commit, "
        f"{result['per_candidate_s']} s per candidate; {result['in_gate_runs']} gate runs "
        f"(the gate once: {gate_wall:.1f} s); target {TARGET_S:.0f} s: "
        + ("met" if wall <= TARGET_S else "NOT met")
    )


if __name__ == "__main__":
    main()
