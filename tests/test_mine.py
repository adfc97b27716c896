"""`rig task mine` turns a real repository's history into calibrated tasks, through the real CLI.

Each test repository (tests/mine_repos.py) is a real git history of fixes, clean and messy: a fix
with tests, a fix without tests, a fix whose reverse conflicts with a later commit, a flaky test,
a fix touching a protected file, a generated file, tests that pass before the fix, a merge. Its
pack is made by `rig pack new`; mining must give each commit exactly the expected verdict, and
every task it made must pass `rig calibrate`.
"""

import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from env_pack import offline
from mine_repos import (
    changed_assertion_repo,
    commit,
    dependency_repo,
    git,
    javascript_repo,
    python_repo,
    shared_tests_repo,
    stop_and_go_repo,
)
from processes import BURST, background_job, interrupt, running, wait_for

from rig.env.activate import activate
from rig.mine.history import GENERATED_MARK
from rig.mine.prompt import DEFAULT_TEMPLATE, issue_text
from rig.packs.manifest import load_pack
from rig.packs.stats import CEILING, FLOOR, task_stats
from rig.packs.tasks import load_tasks
from rig.schema import Cell
from rig.verify.checks import run_hidden
from rig.workspace.build import apply_patch, copy_fixture

RIG = str(Path(sys.executable).with_name("rig"))


# The Python history's pack gets an [environment] from `rig pack new`: built offline, once per module.
ENV_DIR = Path(tempfile.mkdtemp(prefix="rig-test-mine-envs-"))
ENV = offline(ENV_DIR / "envs")


@pytest.fixture(scope="module", autouse=True)
def _environments() -> Iterator[None]:
    yield
    shutil.rmtree(ENV_DIR, ignore_errors=True)


def rig(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RIG, *args], capture_output=True, text=True, timeout=600, env=ENV)


def new_pack(repo: Path, pack: Path) -> Path:
    """`rig pack new --no-example` from `repo`: no task yet, the next step is mining."""
    made = rig("pack", "new", str(pack), "--from", str(repo), "--no-example")
    assert made.returncode == 0, made.stderr
    assert f"rig task mine {repo} --pack {pack}" in made.stdout
    assert not any((pack / "tasks").iterdir()) and not any((pack / "hidden_tests").iterdir())
    return pack


def mined(repo: Path, pack: Path, *args: str) -> dict:
    proc = rig("task", "mine", str(repo), "--pack", str(pack), "--json", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def solution_and_nothing(pack: Path, task: str, tmp_path: Path, env: dict[str, str]) -> list[dict]:
    """`rig run` of `task` by the scripted harness, the reference solution and doing nothing once
    each, under `env`; the records."""
    experiment = tmp_path / "solution-and-nothing.toml"
    experiment.write_text(
        f'name = "solution-and-nothing"\npack = "{pack}"\nharness = "scripted"\nmodel = "scripted"\n'
        f'tasks = ["{task}"]\nrepetitions = 1\nworkers = 2\n'
        '[[conditions]]\nname = "solution"\nharness_options = { policy = "solution" }\n'
        '[[conditions]]\nname = "nothing"\nharness_options = { policy = "nothing" }\n'
    )
    results = tmp_path / "results"
    ran = subprocess.run(
        [RIG, "run", str(experiment), "--results-root", str(results)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**env, "RIG_RUNS_ROOT": str(tmp_path / "runs")},
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    runs = (results / "solution-and-nothing" / "runs.jsonl").read_text().splitlines()
    return [json.loads(line) for line in runs]


@pytest.fixture(scope="module")
def python_mined(tmp_path_factory) -> tuple[Path, Path, dict[str, str], dict]:
    root = tmp_path_factory.mktemp("mine-py")
    repo, expected = python_repo(root)
    pack = new_pack(repo, root / "pack")
    return repo, pack, expected, mined(repo, pack)


@pytest.mark.slow
def test_each_commit_of_a_python_history_gets_the_expected_verdict(python_mined):
    repo, _pack, expected, report = python_mined
    got = {entry["subject"]: entry["verdict"] for entry in report["commits"]}
    mined_ones = [verdict for verdict in expected.values() if verdict == "mined"]
    assert got == expected
    assert report["snapshot"] == git(repo, "rev-parse", "HEAD").strip()
    reasons = {entry["verdict"]: entry["reason"] for entry in report["commits"]}
    assert "calc/_version.py" in reasons["generated"]
    assert "tests/helpers.py" in reasons["protected"]
    assert "test_mean::test_mean_counts_runs changed verdict over 3 runs" in reasons["flaky"]
    assert "passes with the fix already passes before it" in reasons["no-fail-to-pass"]
    assert "hidden tests failed: test_mean2::test_thirds" in reasons["solution-fails"]
    # The funnel: each verdict stops a commit at one step, so each step's count follows from them.
    stops = {
        "merge": "read",
        "root": "read",
        "no-tests": "read",
        "no-source": "read",
        "protected": "read",
        "generated": "read",
        "conflict": "changes",
        "flaky": "applied",
        "solution-fails": "not_flaky",
        "no-fail-to-pass": "passed_after",
        "no-message": "failed_before",
        "calibration": "described",
        "mined": "kept",
    }
    steps = {step: n for step, n in report["funnel"].items() if step not in ("at_parent", "lost")}
    # Every loss counted by its reason, most first.
    losses = Counter(verdict for verdict in expected.values() if verdict != "mined")
    assert report["funnel"]["lost"] == dict(sorted(losses.items(), key=lambda kv: (-kv[1], kv[0])))
    assert list(report["funnel"]["lost"].values()) == sorted(losses.values(), reverse=True)
    order = list(steps)
    assert order[0] == "read" and order[-1] == "kept"
    expected_funnel = {
        step: sum(order.index(stops[verdict]) >= n for verdict in expected.values())
        for n, step in enumerate(order)
    }
    assert steps == expected_funnel
    assert report["funnel"]["read"] == len(expected) and report["funnel"]["kept"] == len(mined_ones)
    by_verdict = {entry["verdict"]: entry["stage"] for entry in report["commits"]}
    assert by_verdict["mined"] == "kept"
    (clamp,) = [e for e in report["commits"] if e["subject"] == "Fix clamp ignoring the upper bound"]
    assert clamp["base"] == "parent" and report["funnel"]["at_parent"] == 1


@pytest.mark.slow
def test_mined_tasks_are_measured_hidden_and_calibrate(python_mined, tmp_path):
    repo, pack, _expected, report = python_mined
    made = {entry["subject"]: entry for entry in report["commits"] if entry["verdict"] == "mined"}
    parse = made["Fix parsing of hex numbers and of pairs split by semicolons in calc/parse.py"]
    # Measured, not assumed: the test that passed before the fix is pass-to-pass.
    assert parse["fail_to_pass"] == [
        "test_parse::test_add_text",
        "test_parse::test_hex",
        "test_parse::test_pair_with_semicolon",
    ]
    assert parse["pass_to_pass"] == ["test_parse::test_pair"]
    # Three changes (one in calc/ops.py, two in calc/parse.py): a decoy leaving out each, and one
    # with the first file's change alone; each measured to fail where task.toml says.
    assert parse["decoys"] == ["first_file_only", "partial_fix_1", "partial_fix_2", "partial_fix_3"]
    tasks = {t.id: t for t in load_tasks(load_pack(pack))}
    decoys = tasks[parse["task"]].spec.decoys
    assert decoys["partial_fix_2"].reason == "the fix without its change at calc/parse.py:2: a partial fix"
    assert decoys["partial_fix_2"].fails_hidden == ["test_parse::test_hex"]
    assert decoys["first_file_only"].fails_hidden == [
        "test_parse::test_hex",
        "test_parse::test_pair_with_semicolon",
    ]
    assert set(tasks) == {entry["task"] for entry in made.values()}
    task = tasks[parse["task"]]
    assert task.spec.hypothesis == "mined"
    assert task.spec.source is not None and task.spec.source.commit == parse["commit"]
    assert task.spec.source.pass_to_pass == ["test_parse::test_pair"]
    assert task.spec.baseline.fails_hidden == parse["fail_to_pass"]
    # The prompt is the commit message as an issue: no file, no test named.
    assert task.spec.prompt.startswith(
        "Fix parsing of hex numbers and of pairs split by semicolons in the code."
    )
    for name in ("calc/parse.py", "parse.py", "test_parse", "test_hex"):
        assert name not in task.spec.prompt
    # The setup takes the commit's tests out of what the agent sees: the hidden copy is the fixed one.
    work = copy_fixture(load_pack(pack).fixture_dir, tmp_path / "work")
    apply_patch(work, task.setup_patch)
    assert "def test_hex" not in (work / "tests" / "test_parse.py").read_text()
    assert "0x1f" not in (work / "calc" / "parse.py").read_text().replace("int(text)", "")
    # Hidden at its own path: the file the tree's tests/ holds, run there, beside the helpers.
    assert task.spec.hidden_at == "own-paths"
    assert "def test_hex" in (task.hidden_dir / "tests" / "test_parse.py").read_text()
    median = made["Fix median of an even number of values"]
    # Before the fix its module does not import (calc/stats.py is not there yet): its test did
    # not run, which fails it.
    assert median["fail_to_pass"] == ["test_stats::test_even"]
    assert tasks[median["task"]].spec.baseline.fails_hidden == ["test_stats::test_even"]
    # Judged by test: a skip and a failure whatever the code are outside the task, not in it.
    fmt = made["Show a thousands separator in big numbers"]
    assert (fmt["fail_to_pass"], fmt["pass_to_pass"]) == (
        ["test_fmt::test_thousands"],
        ["test_fmt::test_small"],
    )
    assert "; 2 tests outside it" in fmt["reason"]
    fmt_source = tasks[fmt["task"]].spec.source
    assert fmt_source is not None and fmt_source.fail_to_pass == ["test_fmt::test_thousands"]
    assert tasks[fmt["task"]].judged == {"test_fmt::test_thousands", "test_fmt::test_small"}
    # Beside it, the pristine files of its folder (the fix changes none there), put back over the
    # agent's and not run; only the commit's test is.
    median_task = tasks[median["task"]]
    hidden = {p.relative_to(median_task.hidden_dir).as_posix() for p in median_task.hidden_dir.rglob("*.py")}
    assert {"tests/test_stats.py", "tests/helpers.py", "tests/conftest.py"} <= hidden
    assert median_task.spec.hidden_tests == ["tests/test_stats.py"]
    assert (pack / "mine-prompt.md").read_text() == DEFAULT_TEMPLATE
    calibration = rig("calibrate", "--pack", str(pack), "--json")
    assert calibration.returncode == 0, calibration.stdout + calibration.stderr
    assert json.loads(calibration.stdout)["ok"] is True
    # The repository is only read.
    assert git(repo, "status", "--porcelain") == ""


@pytest.mark.slow
def test_a_helper_beside_a_hidden_test_is_the_pristine_one(python_mined, tmp_path, monkeypatch):
    """An agent that rewrites the helper its hidden test asserts through, with a wrong fix, still fails."""
    _repo, pack, _expected, report = python_mined
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    (median,) = [e for e in report["commits"] if e["subject"] == "Fix median of an even number of values"]
    (task,) = load_tasks(load_pack(pack), [median["task"]])
    work = copy_fixture(task.pack.fixture_dir, tmp_path / "work")
    apply_patch(work, task.setup_patch)
    (work / "calc" / "stats.py").write_text("def median(values):\n    return 0\n")
    (work / "tests" / "helpers.py").unlink()
    (work / "tests" / "helpers.py").symlink_to(tmp_path / "forged.py")
    (tmp_path / "forged.py").write_text("def close(a, b):\n    return True\n")
    env = activate(task.pack)
    junit, home = tmp_path / "j.xml", tmp_path / "home"
    home.mkdir()

    def hidden():
        return run_hidden(
            work,
            task.hidden_dir,
            junit,
            home,
            task.pack.spec.runner,
            project_env=env,
            placement=task.placement,
        )

    outcome = hidden()
    assert not outcome.ok and outcome.failed == ["test_stats::test_even"], outcome
    assert (work / "tests" / "helpers.py").read_text() == "def close(a, b):\n    return abs(a - b) < 1e-9\n"
    assert (tmp_path / "forged.py").read_text() == "def close(a, b):\n    return True\n"
    # Fixed as the commit did, it passes there.
    (work / "calc" / "stats.py").unlink()
    apply_patch(work, task.solution_patch)
    assert hidden().ok


@pytest.mark.slow
def test_a_run_is_judged_by_its_tasks_tests_not_by_the_tests_outside_it(python_mined, tmp_path):
    """The reference fix succeeds though a test of its hidden file skips and one fails; doing
    nothing fails the fail-to-pass test alone. The records count the tests outside the task."""
    _repo, pack, _expected, report = python_mined
    (fmt,) = [e for e in report["commits"] if e["subject"] == "Show a thousands separator in big numbers"]
    records = {r["condition"]: r for r in solution_and_nothing(pack, fmt["task"], tmp_path, ENV)}
    solution, nothing = records["solution"], records["nothing"]
    assert solution["success"] is True, solution
    assert (solution["hidden"]["collected"], solution["hidden"]["outside"]) == (2, 2)
    assert solution["hidden"]["failed"] == solution["hidden"]["skipped"] == []
    assert nothing["success"] is False and nothing["hidden"]["failed"] == ["test_fmt::test_thousands"]


@pytest.mark.slow
def test_mining_again_skips_what_the_pack_has_and_a_named_commit_outside_history(python_mined, tmp_path):
    repo, pack, _expected, report = python_mined
    done = [entry["commit"] for entry in report["commits"] if entry["verdict"] == "mined"]
    again = mined(repo, pack, *[arg for sha in done for arg in ("--commit", sha)])
    assert [(e["verdict"], e["reason"]) for e in again["commits"]] == [
        ("already-mined", f"already in the pack as {e['task']}")
        for e in report["commits"]
        if e["commit"] in done
    ]
    git(repo, "checkout", "-q", "-b", "later")
    later = commit(
        repo,
        "Fix add of floats after the snapshot",
        {"calc/later.py": "X = 1\n", "tests/test_later.py": "def test_x():\n    pass\n"},
    )
    git(repo, "checkout", "-q", "main")
    outside = mined(repo, pack, "--commit", later)["commits"]
    assert [e["verdict"] for e in outside] == ["outside"]


def test_javascript_history_mines_and_calibrates(tmp_path):
    repo, expected = javascript_repo(tmp_path)
    pack = new_pack(repo, tmp_path / "pack")
    # A glob with a character class, as vitest's default has: the printed reasons keep it.
    manifest = (pack / "pack.toml").read_text()
    (pack / "pack.toml").write_text(
        manifest.replace("[runner]\n", '[runner]\ntest_files = ["**/*.test.[cm]js"]\n', 1)
    )
    report = mined(repo, pack)
    assert {e["subject"]: e["verdict"] for e in report["commits"]} == expected
    (made,) = [e for e in report["commits"] if e["verdict"] == "mined" and "many words" in e["fail_to_pass"]]
    assert made["fail_to_pass"] == ["many words"]
    assert made["pass_to_pass"] == ["one word"]
    assert (pack / "hidden_tests" / made["task"] / "test" / "slug.test.mjs").is_file()
    task_dir = pack / "tasks" / made["task"]
    spec = tomllib.loads((task_dir / "task.toml").read_text())
    # One change in one file: no decoy can be made, and a mined task needs none (its baseline is one).
    assert spec["source"]["repo"] == "slugs" and spec["decoys"] == {}
    # The changed test file goes back to its old version in the setup: the new test is not visible.
    setup = (task_dir / "setup.patch").read_text()
    assert '-test("many words"' in setup and "src/slug.mjs" in setup
    solution = (task_dir / "solution.patch").read_text()
    assert "test/slug.test.mjs" not in solution and "src/slug.mjs" in solution
    # A fix that also changed the protected package.json: its task keeps the snapshot's.
    (script,) = [e for e in report["commits"] if e["subject"] == "Fix the test script to run every file"]
    script_setup = (pack / "tasks" / script["task"] / "setup.patch").read_text()
    assert "src/slug.mjs" in script_setup and "package.json" not in script_setup
    calibration = rig("calibrate", "--pack", str(pack))
    assert calibration.returncode == 0, calibration.stdout + calibration.stderr
    # Mined again, as a person reads it: the mined commit is the pack's already, so none gets past reading.
    again = rig("task", "mine", str(repo), "--pack", str(pack))
    assert again.returncode == 0, again.stderr
    read = len(expected)
    assert f"funnel: {read} read > 0 with source and tests > 0 applied (0 at their parent) > 0 not flaky" in (
        again.stdout
    )
    assert again.stdout.rstrip().endswith("0 calibrated > 0 kept")
    rows = [line for line in again.stdout.splitlines() if line.startswith("│") and "no-tests" in line]
    assert rows and all("no test file (**/*.test.[cm]js)" in row for row in rows), again.stdout


def test_a_fix_that_changes_what_a_test_asserts_is_judged_by_the_tests_new_version(tmp_path):
    repo, expected = changed_assertion_repo(tmp_path)
    pack = new_pack(repo, tmp_path / "pack")
    # The pack protects the tests: the agent cannot bring the old assertion in line itself.
    assert 'dirs = ["test"]' in (pack / "pack.toml").read_text()
    report = mined(repo, pack)
    assert {e["subject"]: e["verdict"] for e in report["commits"]} == expected, report["commits"]
    (task,) = [e for e in report["commits"] if e["verdict"] == "mined"]
    assert task["fail_to_pass"] == ["title case"], task
    spec = tomllib.loads((pack / "tasks" / task["task"] / "task.toml").read_text())
    # The task starts from the old assertion, and the gate before the fix runs the new one.
    assert '"HELLO WORLD"' in (pack / "tasks" / task["task"] / "setup.patch").read_text()
    assert spec["baseline"] == {"fails_stages": ["gate"], "fails_hidden": ["title case"]}
    by_condition = {r["condition"]: r for r in solution_and_nothing(pack, task["task"], tmp_path, ENV)}
    assert by_condition["solution"]["success"] is True, by_condition["solution"]
    assert by_condition["solution"]["check"]["ok"] is True
    nothing = by_condition["nothing"]
    assert nothing["success"] is False and nothing["check"]["failed"] == ["gate"], nothing


def test_a_fix_the_snapshot_cannot_reverse_is_mined_at_its_parent(tmp_path):
    repo, expected = shared_tests_repo(tmp_path)
    older, newer = (git(repo, "rev-parse", f"HEAD~{n}").strip() for n in (1, 0))
    # On the snapshot alone, the older fix's test lines sit right before the newer fix's.
    only = mined(repo, new_pack(repo, tmp_path / "snapshot-only"), "--base", "snapshot")
    verdicts = {e["subject"]: (e["verdict"], e["reason"]) for e in only["commits"]}
    verdict, reason = verdicts["Fix first() returning the second word"]
    assert verdict == "conflict" and "patch failed: test/words.test.mjs" in reason, reason
    assert only["funnel"]["kept"] == 1 and not (tmp_path / "snapshot-only" / "bases").exists()

    pack = new_pack(repo, tmp_path / "pack")
    report = mined(repo, pack)
    assert {e["subject"]: e["verdict"] for e in report["commits"]} == expected
    assert report["funnel"]["kept"] == 2 and report["funnel"]["at_parent"] == 1
    # The tasks' calibration judged what mining measured of the same files, the base's included.
    assert report["calibration_afresh"] == 0 and report["calibration_reused"] >= 5, report
    (at_parent,) = [e for e in report["commits"] if e["base"] == "parent"]
    assert at_parent["commit"] == older and at_parent["fail_to_pass"] == ["first word"]
    spec = tomllib.loads((pack / "tasks" / at_parent["task"] / "task.toml").read_text())
    assert spec["source"]["parent"] == git(repo, "rev-parse", f"{older}^").strip()
    # The base is the parent's tree (the fixture's own AGENTS.md stub beside it), kept in the bundle.
    bundle = pack / "bases" / "bases.bundle"
    heads = git(repo, "bundle", "list-heads", str(bundle)).split()
    assert f"refs/bases/{spec['base']}" in heads
    assert (pack / "tasks" / at_parent["task"] / "setup.patch").read_bytes() == b""
    # Its hidden test is the fix's own version: the newer fix's test is not in it yet.
    hidden = (pack / "hidden_tests" / at_parent["task"] / "test" / "words.test.mjs").read_text()
    assert "first word" in hidden and "last word" not in hidden
    # A machine that never mined it writes the base out of the pack's bundle, pinned by its hash.
    fresh = {**ENV, "RIG_BASES_DIR": str(tmp_path / "fresh-bases")}
    calibration = subprocess.run(
        [RIG, "calibrate", "--pack", str(pack)], capture_output=True, text=True, timeout=600, env=fresh
    )
    assert calibration.returncode == 0, calibration.stdout + calibration.stderr
    base = tmp_path / "fresh-bases" / spec["base"]
    assert "first word" not in (base / "test" / "words.test.mjs").read_text()
    assert 'split(" ")[1]' in (base / "src" / "words.mjs").read_text()
    assert (base / "AGENTS.md").is_file()
    # A run starts from the base: the reference solution succeeds there, and the record pins it.
    records = solution_and_nothing(pack, at_parent["task"], tmp_path, fresh)
    assert {r["condition"]: r["success"] for r in records} == {"solution": True, "nothing": False}
    assert {r["pins"]["base_tree"] for r in records} == {spec["base"]}
    nothing = next(r for r in records if r["condition"] == "nothing")
    assert nothing["hidden"]["failed"] == ["first word"], nothing["hidden"]


@pytest.mark.slow
def test_a_task_at_its_parent_gets_the_environment_its_own_dependencies_call_for(tmp_path, monkeypatch):
    repo, expected = dependency_repo(tmp_path)
    pack = new_pack(repo, tmp_path / "pack")
    report = mined(repo, pack, "--base", "parent", *(arg for sha in expected for arg in ("--commit", sha)))
    assert {e["commit"]: e["verdict"] for e in report["commits"]} == expected, report["commits"]
    by_commit = {e["commit"]: e for e in report["commits"]}
    first, second = (by_commit[sha] for sha in expected)
    assert "in the fixture's environment" in first["reason"] and "rig-no-such-package" in first["reason"]
    assert "fixture's environment" not in second["reason"]
    monkeypatch.setenv("RIG_ENV_DIR", ENV["RIG_ENV_DIR"])
    for key in ("RIG_WHEELS", "UV_OFFLINE", "UV_CACHE_DIR"):
        monkeypatch.setenv(key, ENV[key])
    loaded = load_pack(pack)
    tasks = {t.spec.source.commit: t for t in load_tasks(loaded) if t.spec.source}
    assert tasks[first["commit"]].spec.environment == "fixture"
    assert tasks[second["commit"]].spec.environment == "base"
    snapshot = activate(loaded)
    fallback, own = (activate(tasks[e["commit"]].pack) for e in (first, second))
    assert snapshot is not None and fallback is not None and own is not None
    # The snapshot's dependencies name python-dateutil, the second fix's parent's nothing: two
    # environments, the parent's resolved into its own lock in the pack, named by its inputs. The
    # first fix's parent's make none: its task keeps the fixture's.
    assert fallback.hash == snapshot.hash and own.hash != snapshot.hash
    assert any(p.startswith("python-dateutil") for p in snapshot.packages)
    assert not any(p.startswith("python-dateutil") for p in own.packages)
    (lock,) = (pack / "bases").glob("*.environment.lock.txt")
    assert "python-dateutil" not in lock.read_text()
    calibration = rig("calibrate", "--pack", str(pack))
    assert calibration.returncode == 0, calibration.stdout + calibration.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, BURST], ids=["ctrl-c", "sigterm", "burst"])
def test_ctrl_c_stops_mining_at_once_and_adds_nothing(tmp_path, sig):
    repo, _ = javascript_repo(tmp_path)
    pack = new_pack(repo, tmp_path / "pack")
    manifest = pack / "pack.toml"
    # A gate that takes long, as a real suite does: the signal comes while it runs.
    # A second signal inside the first one's handler once deadlocked it for good (BURST).
    marker = f"rig-mine-gate-{len(sig) if isinstance(sig, tuple) else sig.name}"
    manifest.write_text(
        re.sub(
            r"(?m)^run = .*$", f'run = ["sh", "-c", "sleep 300 # {marker}"]', manifest.read_text(), count=1
        )
    )
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    # Started as a shell's background job is (SIGINT ignored): the command installs its own.
    proc = subprocess.Popen(
        [RIG, "task", "mine", str(repo), "--pack", str(pack)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**ENV, "TMPDIR": str(scratch)},
        preexec_fn=background_job,
    )
    try:
        assert proc.stdout is not None
        assert "checking the fixture passes its gate" in proc.stdout.readline()
        wait_for(marker, proc, 60)
        _out, err = interrupt(proc, 30, sig)
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == (
        f"error: interrupted; the tasks kept so far stay in the pack, every verdict so far in "
        f"{pack / 'mined.jsonl'} (a rerun goes on from there)"
    )
    assert not running(marker), "the gate outlived the mining"
    assert list(scratch.iterdir()) == []
    assert not any((pack / "tasks").iterdir()) and not (pack / "bases").exists()


def test_a_stop_keeps_every_task_and_verdict_so_far_and_a_rerun_goes_on(tmp_path):
    """Stopped while a third commit is measured: the first commit's task is in the pack and
    calibrates, both verdicts are in the journal, and a rerun reports the second from there
    instead of measuring it again."""
    marker = f"rig-mine-hangs-{tmp_path.name}"
    repo, expected = stop_and_go_repo(tmp_path, marker)
    pack = new_pack(repo, tmp_path / "pack")
    proc = subprocess.Popen(
        [RIG, "task", "mine", str(repo), "--pack", str(pack), "-w", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        preexec_fn=background_job,
    )
    journal_file = pack / "mined.jsonl"
    try:
        wait_for(marker, proc, 300)
        # The two newer commits' verdicts are decided (the task kept) before the signal comes.
        deadline = time.monotonic() + 120
        while not journal_file.exists() or len(journal_file.read_text().splitlines()) < 2:
            assert time.monotonic() < deadline, "the newer commits' verdicts never came"
            time.sleep(0.2)
        _out, err = interrupt(proc, 30, signal.SIGINT)
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == 130, err
    assert not running(marker), "the hanging test outlived the mining"
    journal = [json.loads(line) for line in journal_file.read_text().splitlines()]
    assert [(e["subject"], e["verdict"]) for e in journal] == [
        (subject, verdict) for subject, verdict in expected.items() if verdict in ("mined", "no-fail-to-pass")
    ][::-1]
    (task,) = load_tasks(load_pack(pack))
    assert task.spec.source is not None and task.spec.source.commit == journal[0]["commit"]
    assert not list(pack.glob(".*.partial"))
    again = mined(repo, pack, "--max", "2")
    assert [(e["verdict"], e["earlier"]) for e in again["commits"]] == [
        ("already-mined", False),
        ("no-fail-to-pass", True),
    ]
    assert again["commits"][1]["reason"] == journal[1]["reason"]
    calibration = rig("calibrate", "--pack", str(pack), "--json")
    assert calibration.returncode == 0, calibration.stdout + calibration.stderr


def test_bad_input_is_one_line_and_writes_nothing(tmp_path, monkeypatch):
    repo, _ = javascript_repo(tmp_path)
    pack = new_pack(repo, tmp_path / "pack")
    before = sorted(p.relative_to(pack) for p in pack.rglob("*"))
    # Where the scratch copies go: nothing may be left there either.
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setitem(ENV, "TMPDIR", str(scratch))
    cases = [
        (["task", "mine", str(tmp_path / "nope"), "--pack", str(pack)], "no such folder"),
        (
            ["task", "mine", str(repo), "--pack", str(pack), "--snapshot", "v9"],
            "the snapshot commit 'v9' is not a commit",
        ),
        (
            ["task", "mine", str(repo), "--pack", str(pack), "--since", "nope"],
            "--since 'nope' is not a commit",
        ),
        (["task", "mine", str(repo), "--pack", str(tmp_path / "nopack")], "pack.toml"),
    ]
    for args, message in cases:
        proc = rig(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    manifest = (pack / "pack.toml").read_text()
    edits = [
        (manifest.split("[source]")[0], "no [source] commit; pass --snapshot COMMIT"),
        (
            manifest.replace(
                'kind = "node-test"', 'kind = "command"\ncommand = ["true", "{junit}", "{tests}"]'
            ),
            "a command runner has no test file names; say which files are tests with --tests GLOB",
        ),
    ]
    for text, message in edits:
        (pack / "pack.toml").write_text(text)
        proc = rig("task", "mine", str(repo), "--pack", str(pack))
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    (pack / "pack.toml").write_text(manifest)
    # Every task would stand on a fixture that fails its own gate: nothing is mined.
    visible = pack / "fixture" / "test" / "slug.test.mjs"
    visible.write_text(visible.read_text().replace('"hello"', '"HELLO"'))
    proc = rig("task", "mine", str(repo), "--pack", str(pack))
    assert proc.returncode == 2 and "the fixture fails its own gate" in proc.stderr, proc.stderr
    assert sorted(p.relative_to(pack) for p in pack.rglob("*")) == before
    assert list(scratch.iterdir()) == []


def test_the_prompt_names_no_file_or_test_and_drops_trailers():
    text = issue_text(
        "fix(api): `paginate()` in app/pagination.py reports has_next on the last page",
        "test_last_page showed it.\n\nSigned-off-by: Dev <dev@example.invalid>\nFixes #12",
        ["app/pagination.py", "tests/test_pagination.py"],
        ["test_pagination::test_last_page"],
        DEFAULT_TEMPLATE,
    )
    assert text is not None
    assert text.startswith("`paginate()` in the code reports has_next on the last page.")
    assert "a test showed it." in text
    for gone in (
        "app/pagination.py",
        "pagination.py",
        "test_last_page",
        "Signed-off-by",
        "Fixes #12",
        "fix(api)",
    ):
        assert gone not in text
    assert issue_text("fix: app/pagination.py", "", ["app/pagination.py"], [], DEFAULT_TEMPLATE) is None
    custom = issue_text("Fix the sign of subtract", "", [], [], "Issue: $title\n$details\nGo.")
    assert custom == "Issue: Fix the sign of subtract.\n\nGo.\n"


def test_pack_stats_flags_tasks_every_run_solved_or_none_did():
    cells = [
        Cell(task="easy", condition="a", done=4, successes=4),
        Cell(task="easy", condition="b", done=4, successes=4),
        Cell(task="hard", condition="a", done=4, successes=0),
        Cell(task="hard", condition="b", done=3, successes=0, pending=1),
        Cell(task="useful", condition="a", done=4, successes=3),
        Cell(task="useful", condition="b", done=4, successes=1),
        Cell(task="unrun", condition="a", pending=4),
    ]
    stats = {s.task: s for s in task_stats(cells)}
    assert {task: s.flag for task, s in stats.items()} == {
        "easy": CEILING,
        "hard": FLOOR,
        "useful": None,
        "unrun": None,
    }
    assert stats["useful"].rate("a") == 0.75 and stats["useful"].rate("b") == 0.25
    assert stats["unrun"].rate("a") is None


@pytest.mark.parametrize(
    ("head", "generated"),
    [
        (b"# generated by the release script: do not edit\nVERSION = '0.1.1'\n", True),
        (b"// Code generated by protoc-gen-go. DO NOT EDIT.\npackage pb\n", True),
        (b"# This file is automatically generated, changes will be lost\n", True),
        (b"/* @generated */\n", True),
        (b"# Autogenerated from schema.json\n", True),
        # python-slugify's pep8.sh, a hand-written lint script whose comment names generated files.
        (
            b"#!/bin/bash\n\n# Ignoring autogenerated files\n#  -- Migration directories\npep8 slugify\n",
            False,
        ),
        (b"def generated_ids():\n    return [1, 2]\n", False),
    ],
)
def test_a_generated_file_is_one_that_says_so_of_itself(head, generated):
    assert bool(GENERATED_MARK.search(head)) is generated
