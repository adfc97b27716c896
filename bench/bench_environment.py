"""What does a pack's project environment cost: per run, and to build (issue #34, item 9)?

Two measurements, both through the real CLI as a user runs it, offline (uv installs from
build/wheels: RIG_WHEELS, UV_OFFLINE=1, as tests/env_pack.py does):

1. Per-run overhead. Two packs with the same fixture, task, hidden tests and gate
   (`["{python}", "-m", "pytest", "-q", "tests"]`); one has `[environment]` with `extras =
   ["test"]`, the other none, so its gate and hidden tests run on the rig's own interpreter (which
   has pytest and python-dateutil). The fixture is tests/data/env_project turned into a flat layout
   (`envproject/` at the root, no `src/`) plus a visible test: without an environment nothing
   installs the project, and the rig's hidden-test runner then reads its own pytest.ini and
   appends the workspace to sys.path (rig/runners/pytest.py), so a project's `pythonpath = ["src"]`
   would reach the gate but not the hidden tests; at the root, both import it the same way on both
   sides. The task plants a bug; the scripted policy "solution" applies the reference fix, so every
   run passes the gate and both hidden tests (the bench stops otherwise, or if the environment side
   shows no environment in its pins).

   Each side is `rig run` of an experiment of N repetitions of that one run, one worker, the
   default sandbox, in fresh results and runs folders. The environment is built (and one untimed
   run per side made, to warm the shared bytecode prefix) before any timing, so every timed run
   finds it in the cache. The records' own `wall_s` does not cover a whole run: it stops when the
   record is made, before the workspace and its verification copy are removed and record.json is
   written and redacted. So the per-run figure is the spacing of the runs' `started_at`:
   (last - first) / (N - 1), which covers everything a run costs and nothing the experiment pays
   once (interpreter start, imports, `make_context` with its environment lookup and fingerprint,
   the summary). The CLI's wall clock divided by N (those once-per-experiment costs included) and
   the mean of the records' `wall_s` are reported beside it as cross-checks, with the CLI's CPU
   (user + system, children included) divided by N likewise, which a busy machine disturbs far less than wall
   time, and the once-per-experiment remainder (CLI wall - N x spacing). The sides are
   interleaved over R rounds, alternating which goes first; the ratio is median(with) /
   median(without) of the per-run figures. Target: at most 1.05x ("nothing copied per run").

2. Building. Per round, `rig env build PACK` of a fresh copy of the environment pack (no lock
   yet, so resolving counts too) into an empty RIG_ENV_DIR, timed by wall clock from outside:
   * cold: with an empty UV_CACHE_DIR too, so uv unpacks every wheel from build/wheels;
   * warm uv cache: the same, with a uv cache a previous build filled (a cold environment on a
     machine that has built others);
   * cache hit: `rig env build` again right after the cold build.
   The order of cold and warm alternates by round. Targets: a cold build at most 60 s, a cache hit
   at most 1 s (medians of the CLI's wall clock). Reported beside them: the install time the build
   recorded in its manifest (`seconds`: no resolving, no CLI), the same hit in this process
   (`rig.env.build.build`, and `rig.env.activate.activate`, which adds the environment's
   fingerprint: what `rig run` pays once per experiment), and `rig env build --help`, the CLI's
   start-up alone, which is most of a hit through the CLI.

It is a measurement, not a test: it exits 0 whatever the figures (and 1 if rig itself fails, with
the command and its output's tail). Run it from the repository root:

    .venv/bin/python bench/bench_environment.py [--runs N] [--rounds R]   # defaults: 4, 3

It prints per-round figures and final lines and writes bench/results/environment.json
(git-ignored). Ctrl-C stops the rig command in flight, removes the temporary folders and exits 130.
"""

import argparse
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

REPO = Path(__file__).resolve().parents[1]
RIG = str(Path(sys.executable).with_name("rig"))
PROJECT = REPO / "tests" / "data" / "env_project"
WHEELS = REPO / "build" / "wheels"
RESULTS = REPO / "bench" / "results" / "environment.json"

TARGET_RATIO = 1.05
TARGET_COLD_S = 60.0
TARGET_HIT_S = 1.0
SIDES = ("with", "without")
# A rig command that takes longer than this is stuck, not slow.
COMMAND_TIMEOUT_S = 900

MANIFEST = """name = "benchenv"
[gate]
command = ["pytest", "tests"]
run = ["{python}", "-m", "pytest", "-q", "tests"]
report = "exit-code"
[runner]
kind = "pytest"
"""
ENVIRONMENT = '[environment]\nextras = ["test"]\n'
# env_project's src layout, flattened (see the docstring for why).
SRC_FIND = '[tool.setuptools.packages.find]\nwhere = ["src"]\n'
FLAT = '[tool.setuptools]\npackages = ["envproject"]\n'
FIX = "relativedelta(months=1).months"
BUG = "relativedelta(months=2).months"
PATCH = """diff --git a/envproject/__init__.py b/envproject/__init__.py
--- a/envproject/__init__.py
+++ b/envproject/__init__.py
@@ -5,4 +5,4 @@ from dateutil.relativedelta import relativedelta
 
 def next_month_days(days: int) -> int:
     \"\"\"The days of `days` plus one month's relativedelta, as a number the tests check.\"\"\"
-    return days + {old}
+    return days + {new}
"""
VISIBLE_TEST = """from envproject import next_month_days


def test_next_month_days():
    assert next_month_days(3) == 4
"""
HIDDEN_TEST = """from envproject import next_month_days


def test_next_month_of_zero():
    assert next_month_days(0) == 1


def test_next_month_of_thirty():
    assert next_month_days(30) == 31
"""
TASK = """id = "next_month"
hypothesis = "a plain bug fix in a project with dependencies"
timeout_s = 120
prompt = "next_month_days adds two months; fix it."

[baseline]
fails_stages = ["gate"]
fails_hidden = [
    "test_envproject_hidden::test_next_month_of_zero",
    "test_envproject_hidden::test_next_month_of_thirty",
]

[decoys.special_case]
reason = "answers the visible test's one case"
fails_stages = []
fails_hidden = [
    "test_envproject_hidden::test_next_month_of_zero",
    "test_envproject_hidden::test_next_month_of_thirty",
]

[decoys.zero_case]
reason = "answers one hidden case"
fails_stages = ["gate"]
fails_hidden = ["test_envproject_hidden::test_next_month_of_thirty"]
"""
# Decoys (a loaded task needs two), on top of the planted bug: (name, the special case).
DECOYS = (("special_case", 3), ("zero_case", 0))
DECOY_PATCH = """diff --git a/envproject/__init__.py b/envproject/__init__.py
--- a/envproject/__init__.py
+++ b/envproject/__init__.py
@@ -5,4 +5,6 @@ from dateutil.relativedelta import relativedelta
 
 def next_month_days(days: int) -> int:
     \"\"\"The days of `days` plus one month's relativedelta, as a number the tests check.\"\"\"
+    if days == {case}:
+        return {case} + 1
     return days + {bug}
"""
EXPERIMENT = """name = "{name}"
harness = "scripted"
model = "scripted"
pack = "{pack}"
tasks = "all"
repetitions = {reps}
workers = 1
seed = 34
[timeouts]
agent_s = 120
stall_s = 60

[[conditions]]
name = "solution"
harness_options = {{ policy = "solution" }}
"""


class RigFailed(Exception):
    """A rig command that failed: the bench reports it and stops, it does not work around it."""


class Interrupted(Exception):
    pass


def _on_sigint(_signum: int, _frame: FrameType | None) -> None:
    raise Interrupted


@dataclass
class Done:
    wall_s: float
    cpu_s: float  # user + system of the rig process and every process it waited for
    out: str


def _children_cpu_s() -> float:
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return kids.ru_utime + kids.ru_stime


def rig(env: dict[str, str], *args: str, cwd: Path = REPO) -> Done:
    """The rig CLI under `env`, timed from outside; RigFailed unless it exits 0.

    The child gets its own session, so a Ctrl-C reaches it only through here: forwarded as SIGINT
    (rig stops its runs in flight), then SIGKILL if it has not ended within 20 s."""
    command = [RIG, *args]
    start, cpu = time.perf_counter(), _children_cpu_s()
    proc = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=COMMAND_TIMEOUT_S)
    except BaseException:
        _stop(proc)
        raise
    done = Done(time.perf_counter() - start, _children_cpu_s() - cpu, out)
    if proc.returncode != 0:
        tail = "\n".join((out + err).strip().splitlines()[-15:])
        raise RigFailed(f"`{' '.join(command)}` exited {proc.returncode}:\n{tail}")
    return done


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()


# --- the packs --------------------------------------------------------------------------------


def make_fixture(where: Path) -> Path:
    """env_project, flattened, with a visible test."""
    shutil.copytree(PROJECT, where, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    (where / "src" / "envproject").rename(where / "envproject")
    (where / "src").rmdir()
    pyproject = (where / "pyproject.toml").read_text()
    init = (where / "envproject" / "__init__.py").read_text()
    if SRC_FIND not in pyproject or FIX not in init:
        raise SystemExit(f"{PROJECT} changed; update the bench's flattening of it")
    (where / "pyproject.toml").write_text(pyproject.replace(SRC_FIND, FLAT))
    (where / "tests").mkdir()
    (where / "tests" / "test_next_month.py").write_text(VISIBLE_TEST)
    return where


def make_pack(where: Path, fixture: Path, environment: bool) -> Path:
    shutil.copytree(fixture, where / "fixture")
    (where / "pack.toml").write_text(MANIFEST + (ENVIRONMENT if environment else ""))
    task = where / "tasks" / "next_month"
    task.mkdir(parents=True)
    (task / "task.toml").write_text(TASK)
    (task / "setup.patch").write_text(PATCH.format(old=FIX, new=BUG))
    (task / "solution.patch").write_text(PATCH.format(old=BUG, new=FIX))
    (task / "decoys").mkdir()
    for decoy, case in DECOYS:
        (task / "decoys" / f"{decoy}.patch").write_text(DECOY_PATCH.format(case=case, bug=BUG))
    hidden = where / "hidden_tests" / "next_month"
    hidden.mkdir(parents=True)
    (hidden / "test_envproject_hidden.py").write_text(HIDDEN_TEST)
    return where


def base_env(scratch: Path, env_dir: Path, uv_cache: Path) -> dict[str, str]:
    if not any(WHEELS.glob("setuptools-*.whl")):
        raise SystemExit(f"{WHEELS} has no setuptools wheel: run `make setup-dev` (fills build/wheels)")
    return {
        **os.environ,
        "RIG_ENV_DIR": str(env_dir),
        "RIG_WHEELS": str(WHEELS),
        "UV_OFFLINE": "1",
        "UV_CACHE_DIR": str(uv_cache),
        "RIG_CALIBRATION_DIR": str(scratch / "calibration"),
    }


# --- 1. per-run overhead ----------------------------------------------------------------------


@dataclass
class RunSample:
    period_s: float  # spacing of started_at: the whole of one run
    cli_s: float  # the CLI's wall clock / N, once-per-experiment costs included
    cpu_s: float  # the CLI's CPU (children included) / N, likewise
    record_s: float  # mean of the records' wall_s
    once_s: float  # the CLI's wall clock minus N periods: what the experiment pays once


FIELDS = ("period", "cli", "cpu", "record", "once")


def _rounded(figures: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    return {side: {k: round(v, 4) for k, v in by.items()} for side, by in figures.items()}


def _ts(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


def run_side(
    side: str, pack: Path, reps: int, folder: Path, env: dict[str, str], label: str
) -> tuple[Done, list[dict]]:
    """`rig run` of `reps` solution runs on `pack` in fresh folders under `folder`, and its records."""
    folder.mkdir(parents=True)
    name = f"bench-env-{side}-{label}"
    config = folder / f"{name}.toml"
    config.write_text(EXPERIMENT.format(name=name, pack=pack, reps=reps))
    env = {**env, "RIG_RESULTS_ROOT": str(folder / "results"), "RIG_RUNS_ROOT": str(folder / "runs")}
    done = rig(env, "run", str(config))
    runs = folder / "results" / name / "runs.jsonl"
    records = [json.loads(line) for line in runs.read_text().splitlines()] if runs.exists() else []
    if len(records) != reps:
        raise RigFailed(f"`rig run {config}` recorded {len(records)} runs, not {reps}")
    for record in records:
        problems = []
        if not record["success"]:
            problems.append(f"success false (failing stage {record.get('failing_stage')})")
        if (record.get("hidden") or {}).get("collected") != 2:
            problems.append(f"hidden collected {(record.get('hidden') or {}).get('collected')}, not 2")
        has_env = record["pins"].get("environment_hash") is not None
        if has_env != (side == "with"):
            problems.append(f"environment_hash {record['pins'].get('environment_hash')!r}")
        if problems:
            raise RigFailed(f"run {record['run_id']} of `rig run {config}` is not a complete run: {problems}")
    return done, records


def sample_of(done: Done, records: list[dict]) -> RunSample:
    starts = sorted(_ts(r["started_at"]) for r in records)
    period = (starts[-1] - starts[0]) / (len(starts) - 1)
    return RunSample(
        period_s=period,
        cli_s=done.wall_s / len(records),
        cpu_s=done.cpu_s / len(records),
        record_s=statistics.fmean(float(r["wall_s"]) for r in records),
        once_s=done.wall_s - len(records) * period,
    )


def bench_runs(scratch: Path, runs: int, rounds: int) -> tuple[dict[str, object], float]:
    fixture = make_fixture(scratch / "project")
    packs = {
        "with": make_pack(scratch / "pack-with", fixture, environment=True),
        "without": make_pack(scratch / "pack-without", fixture, environment=False),
    }
    env = base_env(scratch, scratch / "envs", scratch / "uv-cache")
    build_s = rig(env, "env", "build", str(packs["with"])).wall_s
    print(f"environment built once before timing: {build_s:.1f} s", flush=True)
    for side in SIDES:  # untimed: the bytecode prefix and the page cache warmed for both
        run_side(side, packs[side], 1, scratch / f"warmup-{side}", env, "warmup")
        shutil.rmtree(scratch / f"warmup-{side}")

    samples: dict[str, list[RunSample]] = {side: [] for side in SIDES}
    round_ratios: list[float] = []
    per_round: list[dict[str, object]] = []
    print(f"\nper-run overhead: {runs} runs per side and round, rounds={rounds} (seconds per run)")
    print(
        "  period: started_at spacing (the figure compared); cli: the CLI's wall / runs; cpu: its CPU "
        "/ runs; record: mean wall_s; once: CLI wall - runs x period"
    )
    columns = [f"{field} {side}" for field in FIELDS for side in ("w", "w/o")]
    header = ("round", "first", "ratio", *columns)
    widths = (5, 7, 6, *(max(7, len(c)) for c in columns))
    print("  ".join(f"{h:>{w}}" for h, w in zip(header, widths, strict=True)), flush=True)

    def row(first: str, label: str, ratio: float, got: dict[str, dict[str, float]]) -> None:
        cells = [first, label, f"{ratio:.2f}x"]
        cells += [f"{got[side][field]:.3f}" for field in FIELDS for side in SIDES]
        print("  ".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True)), flush=True)

    for r in range(rounds):
        order = SIDES if r % 2 == 0 else SIDES[::-1]
        got: dict[str, RunSample] = {}
        for side in order:
            folder = scratch / f"r{r + 1}-{side}"
            done, records = run_side(side, packs[side], runs, folder, env, f"r{r + 1}")
            shutil.rmtree(folder)
            got[side] = sample_of(done, records)
            samples[side].append(got[side])
        ratio = got["with"].period_s / got["without"].period_s
        round_ratios.append(ratio)
        figures = {side: {field: getattr(got[side], f"{field}_s") for field in FIELDS} for side in SIDES}
        per_round.append({"round": r + 1, "first": order[0], "ratio": round(ratio, 3)} | _rounded(figures))
        row(str(r + 1), order[0], ratio, figures)

    medians = {
        side: {field: statistics.median(getattr(s, f"{field}_s") for s in samples[side]) for field in FIELDS}
        for side in SIDES
    }
    ratios = {field: medians["with"][field] / medians["without"][field] for field in FIELDS}
    row("med", "", ratios["period"], medians)
    print(
        f"  ratios of medians: cli {ratios['cli']:.2f}x, cpu {ratios['cpu']:.2f}x, "
        f"record {ratios['record']:.2f}x; median of the rounds' own ratios "
        f"{statistics.median(round_ratios):.2f}x"
    )
    report = {
        "runs_per_side_and_round": runs,
        "environment_build_s": round(build_s, 3),
        "rounds": per_round,
        "medians_s": _rounded(medians),
        "ratios": {k: round(v, 3) for k, v in ratios.items()},
        "median_of_round_ratios": round(statistics.median(round_ratios), 3),
        "ratio": round(ratios["period"], 3),
        "target": TARGET_RATIO,
        "target_met": ratios["period"] <= TARGET_RATIO,
    }
    return report, ratios["period"]


# --- 2. building ------------------------------------------------------------------------------


def _install_s(env_dir: Path) -> float | None:
    """The `seconds` the build wrote into its manifest: uv's install and the setup, no resolving."""
    manifests = list(env_dir.glob("*/.rig-env.json"))
    return float(json.loads(manifests[0].read_text())["seconds"]) if len(manifests) == 1 else None


def build_once(scratch: Path, fixture: Path, uv_cache: Path, label: str) -> tuple[float, float | None, Path]:
    """`rig env build` of a fresh pack copy into an empty cache: (wall s, install s, the cache)."""
    pack = make_pack(scratch / f"pack-{label}", fixture, environment=True)
    env_dir = scratch / f"envs-{label}"
    env = base_env(scratch, env_dir, uv_cache)
    done = rig(env, "env", "build", str(pack))
    if "built in" not in done.out:
        raise RigFailed(f"`rig env build {pack}` into an empty {env_dir} did not say: {done.out.strip()}")
    return done.wall_s, _install_s(env_dir), pack


def hit_in_process(scratch: Path, pack: Path, env_dir: Path, uv_cache: Path) -> tuple[float, float]:
    """Seconds of `rig.env.build.build` (a cache hit) and of `rig.env.activate.activate` (the hit
    plus fingerprinting the environment: what `rig run` pays once per experiment), in this process,
    so without the CLI's interpreter start and imports."""
    from rig.env.activate import activate
    from rig.env.build import build
    from rig.packs.manifest import load_pack

    saved = dict(os.environ)
    os.environ.update(base_env(scratch, env_dir, uv_cache))
    try:
        loaded = load_pack(pack)
        start = time.perf_counter()
        result = build(loaded)
        built_s = time.perf_counter() - start
        start = time.perf_counter()
        activate(loaded)
        activate_s = time.perf_counter() - start
    finally:
        os.environ.clear()
        os.environ.update(saved)
    if result.built:
        raise RigFailed(f"rig.env.build.build({pack}) built again on a cache hit")
    return built_s, activate_s


BUILD_KINDS = ("cold", "warm uv", "hit", "hit in-process", "activate", "rig start-up")


def bench_builds(scratch: Path, rounds: int) -> tuple[dict[str, object], dict[str, float]]:
    fixture = make_fixture(scratch / "project-build")
    warm_cache = scratch / "uv-cache-warm"
    build_once(scratch, fixture, warm_cache, "fill")  # fills the warm uv cache; not timed
    for leftover in ("pack-fill", "envs-fill"):
        shutil.rmtree(scratch / leftover)
    hit_in_process(scratch, scratch / "pack-with", scratch / "envs", scratch / "uv-cache")  # imports

    samples: dict[str, list[float]] = {k: [] for k in BUILD_KINDS}
    install: dict[str, list[float]] = {"cold": [], "warm uv": []}
    per_round: list[dict[str, object]] = []
    print(f"\nbuilding: rig env build, rounds={rounds} (wall s; cold builds: install s from the manifest)")
    header = ("round", "first", "cold", "warm uv", "hit", "in-proc", "activate", "start-up")
    widths = (5, 7, 12, 12, 5, 7, 8, 8)
    print("  ".join(f"{h:>{w}}" for h, w in zip(header, widths, strict=True)), flush=True)
    for r in range(rounds):
        order = ("cold", "warm uv") if r % 2 == 0 else ("warm uv", "cold")
        got: dict[str, float] = {}
        got_install: dict[str, float | None] = {}
        for kind in order:
            label = f"r{r + 1}-{kind.replace(' ', '')}"
            cache = scratch / f"uv-cache-{label}" if kind == "cold" else warm_cache
            env_dir = scratch / f"envs-{label}"
            got[kind], got_install[kind], pack = build_once(scratch, fixture, cache, label)
            if kind == "cold":
                hit = rig(base_env(scratch, env_dir, cache), "env", "build", str(pack))
                if "built in" in hit.out:
                    raise RigFailed(f"a second `rig env build {pack}` built again: {hit.out.strip()}")
                got["hit"] = hit.wall_s
                got["hit in-process"], got["activate"] = hit_in_process(scratch, pack, env_dir, cache)
                # The CLI's fixed cost, for reading the hit against: start, imports, argument parsing.
                got["rig start-up"] = rig(base_env(scratch, env_dir, cache), "env", "build", "--help").wall_s
                shutil.rmtree(cache)
            shutil.rmtree(env_dir)
            shutil.rmtree(pack)
        for kind in BUILD_KINDS:
            samples[kind].append(got[kind])
        for kind, seconds in got_install.items():
            if seconds is not None:
                install[kind].append(seconds)
        per_round.append(
            {"round": r + 1, "first": order[0]}
            | {kind: round(got[kind], 3) for kind in BUILD_KINDS}
            | {f"{kind} install": got_install[kind] for kind in install}
        )
        cells = [f"{got[k]:.2f} ({got_install[k] or float('nan'):.2f})" for k in ("cold", "warm uv")]
        cells += [f"{got[k]:.2f}" for k in BUILD_KINDS[2:]]
        print("  ".join(f"{c:>{w}}" for c, w in zip([str(r + 1), order[0], *cells], widths, strict=True)))
    medians = {k: statistics.median(v) for k, v in samples.items()}
    install_medians = {k: round(statistics.median(v), 3) if v else None for k, v in install.items()}
    cells = [f"{medians[k]:.2f} ({install_medians[k] or float('nan'):.2f})" for k in ("cold", "warm uv")]
    cells += [f"{medians[k]:.2f}" for k in BUILD_KINDS[2:]]
    print("  ".join(f"{c:>{w}}" for c, w in zip(["med", "", *cells], widths, strict=True)), flush=True)
    report = {
        "rounds": per_round,
        "medians_s": {k: round(v, 3) for k, v in medians.items()},
        "install_medians_s": install_medians,
        "target_cold_s": TARGET_COLD_S,
        "target_hit_s": TARGET_HIT_S,
        "cold_target_met": medians["cold"] <= TARGET_COLD_S,
        "hit_target_met": medians["hit"] <= TARGET_HIT_S,
    }
    return report, medians


# --- main -------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4, help="runs per side and round (at least 2)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of each measurement")
    args = parser.parse_args()
    runs, rounds = max(2, args.runs), max(1, args.rounds)

    signal.signal(signal.SIGINT, _on_sigint)
    scratch = Path(tempfile.mkdtemp(prefix="rig-bench-env-"))
    print(f"bench environment: runs={runs}, rounds={rounds}, scratch {scratch}", flush=True)
    try:
        per_run, ratio = bench_runs(scratch, runs, rounds)
        builds, built = bench_builds(scratch, rounds)
    except Interrupted:
        print("\ninterrupted: nothing written", file=sys.stderr)
        raise SystemExit(130) from None
    except RigFailed as exc:
        print(f"\nrig failed; the bench stops (nothing written):\n{exc}", file=sys.stderr)
        raise SystemExit(1) from None
    finally:
        # A second Ctrl-C must not leave the temporary folders behind.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        shutil.rmtree(scratch, ignore_errors=True)

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "load_avg_end": [round(x, 2) for x in os.getloadavg()],
        "per_run": per_run,
        "build": builds,
    }
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    verdict = {True: "met", False: "NOT met"}
    print(
        f"\nenvironment/no-environment per-run ratio: {ratio:.2f}x (median of {rounds} rounds, "
        f"{runs} runs each); target <= {TARGET_RATIO}x: {verdict[ratio <= TARGET_RATIO]}"
    )
    print(
        f"cold build: {built['cold']:.2f} s (warm uv cache {built['warm uv']:.2f} s); "
        f"target <= {TARGET_COLD_S:.0f} s: {verdict[built['cold'] <= TARGET_COLD_S]}"
    )
    print(
        f"cache hit: {built['hit']:.2f} s; target <= {TARGET_HIT_S:.0f} s: "
        f"{verdict[built['hit'] <= TARGET_HIT_S]} (in-process {built['hit in-process']:.2f} s, "
        f"activate {built['activate']:.2f} s; the CLI's start-up alone {built['rig start-up']:.2f} s)"
    )
    print(f"results in {RESULTS.relative_to(REPO)}")


if __name__ == "__main__":
    main()
