"""The run pipeline end to end: real `rig run` processes, the scripted harness, real git and pytest."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from builtin_pack import FIXTURE_DIR

from rig.env.activate import activate
from rig.packs.manifest import load_pack
from rig.packs.stats import CEILING
from rig.packs.tasks import load_tasks
from rig.paths import REPO_ROOT
from rig.workspace.build import tree_digest

RIG = str(Path(sys.executable).with_name("rig"))
ALL_TASKS = [t.id for t in load_tasks()]
NOTES_JS = REPO_ROOT / "packs" / "notes-js"


def write_experiment(tmp_path: Path, name: str, conditions: str, **settings) -> Path:
    """An experiment config in tmp_path; settings become top-level keys, timeouts a table."""
    timeouts = settings.pop("timeouts", {"agent_s": 60, "stall_s": 30})
    settings.setdefault("harness", "scripted")
    settings.setdefault("tasks", ALL_TASKS)
    lines = [f"{key} = {json.dumps(value)}" for key, value in settings.items()]
    lines.append("[timeouts]")
    lines += [f"{key} = {json.dumps(value)}" for key, value in timeouts.items()]
    path = tmp_path / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n" + conditions)
    return path


def condition(name: str, policy: str, remove: tuple[str, ...] = (), **options) -> str:
    opts = ", ".join(f"{k} = {json.dumps(v)}" for k, v in {"policy": policy, **options}.items())
    text = f'\n[[conditions]]\nname = "{name}"\nharness_options = {{ {opts} }}\n'
    if remove:
        text += f"remove_files = {json.dumps(list(remove))}\n"
    return text


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


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def results(tmp_path: Path, name: str) -> Path:
    return tmp_path / "results" / name


AGENTS_ARMS = condition("agents_md", "solution") + condition("no_agents_md", "solution", ("AGENTS.md",))


@pytest.mark.slow
def test_solution_policy_succeeds_everywhere_and_leaves_receipts(tmp_path):
    before = tree_digest(FIXTURE_DIR, skip_caches=False)
    environment = activate(load_pack())
    assert environment is not None
    exp = write_experiment(tmp_path, "smoke", AGENTS_ARMS, workers=3, seed=3)
    proc = rig(tmp_path, "run", str(exp))
    assert proc.returncode == 0, proc.stderr
    records = read_jsonl(results(tmp_path, "smoke") / "runs.jsonl")
    assert len(records) == 2 * len(ALL_TASKS)
    assert sorted(r["run_id"] for r in records) == sorted(
        f"{t}__{c}__r01" for t in ALL_TASKS for c in ("agents_md", "no_agents_md")
    )
    for record in records:
        assert record["success"], record
        assert record["failing_stage"] is None and record["attempt"] == 1
        assert record["protected"] == {"modified": [], "added": [], "deleted": [], "restored": True}
        assert record["metrics"]["ran_check_script"] is True
        assert record["metrics"]["tool_calls_by_name"] == {"read": 1, "bash": 2}
        assert record["pins"]["fixture_hash"] == tree_digest(FIXTURE_DIR)
        assert len(record["pins"]["baseline_commit"]) == 40
        # The gate's tools are the built-in pack's [environment]'s, pinned from it.
        assert record["pins"]["environment_hash"] == environment.hash
        assert (record["pins"]["ruff_version"], record["pins"]["pytest_version"]) == ("0.17.6", "9.2.0")
        assert record["pins"]["python_version"] == environment.python_version
        folder = results(tmp_path, "smoke") / record["artifacts"]
        for name in ("session.jsonl", "stdout.log", "stderr.log", "diff.patch", "check.json", "record.json"):
            assert (folder / name).is_file(), (folder, name)
        assert (folder / "hidden-junit.xml").is_file()
        assert json.loads((folder / "record.json").read_text())["run_id"] == record["run_id"]
        read_agents = "AGENTS.md" in record["metrics"]["docs_read"]
        assert read_agents == (record["condition"] == "agents_md")
    assert "status per cell" in proc.stdout
    assert tree_digest(FIXTURE_DIR, skip_caches=False) == before


@pytest.mark.slow
def test_doing_nothing_fails_where_the_task_says(tmp_path):
    arms = condition("agents_md", "nothing") + condition("no_agents_md", "nothing", ("AGENTS.md",))
    exp = write_experiment(tmp_path, "idle", arms, workers=2)
    assert rig(tmp_path, "run", str(exp)).returncode == 0
    records = read_jsonl(results(tmp_path, "idle") / "runs.jsonl")
    assert len(records) == 2 * len(ALL_TASKS)
    expected = {t.id: t.spec.baseline for t in load_tasks()}
    for record in records:
        want = expected[record["task"]]
        assert not record["success"]
        assert record["check"]["failed"] == [s for s in record["check"]["failed"] if s in want.fails_stages]
        assert sorted(record["check"]["failed"]) == sorted(want.fails_stages)
        assert sorted(record["hidden"]["failed"]) == sorted(want.fails_hidden)
        assert record["failing_stage"] == (record["check"]["failed"] or ["hidden"])[0]
        assert not record["infra"]["is_infra"]


def _agent_processes() -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError):
            continue
        if "scripted/agent.py" in cmdline or cmdline.strip() == "sleep 3600":
            found.append(cmdline)
    return found


# Looks for any scripted agent on the machine: run with no other test running.
@pytest.mark.serial
def test_hung_agent_is_killed_at_its_timeout_with_its_children(tmp_path):
    exp = write_experiment(
        tmp_path,
        "hung",
        condition("hang", "hang"),
        tasks=["t1_fix_pagination"],
        timeouts={"agent_s": 3, "stall_s": 120},
    )
    start = time.monotonic()
    proc = rig(tmp_path, "run", str(exp))
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - start < 60
    (record,) = read_jsonl(results(tmp_path, "hung") / "runs.jsonl")
    assert record["timed_out"] is True and record["exit_code"] is None
    # The agent's own failure, scored; the unfixed code is still verified, as evidence.
    assert record["hang"] == "timeout" and not record["infra"]["is_infra"]
    assert not record["success"] and record["failing_stage"] == "timeout"
    assert record["check"]["failed"] == ["pytest"]
    assert _agent_processes() == []


def test_infra_failures_are_quarantined_and_rerun_without_overwriting(tmp_path):
    exp = write_experiment(
        tmp_path,
        "flaky",
        condition("flaky", "flaky"),
        tasks=["t1_fix_pagination", "t4_split_constant"],
        max_consecutive_infra=10,
    )
    proc = rig(tmp_path, "run", str(exp))
    assert proc.returncode == 0, proc.stderr
    root = results(tmp_path, "flaky")
    quarantined = read_jsonl(root / "quarantine.jsonl")
    scored = read_jsonl(root / "runs.jsonl")
    assert sorted(r["run_id"] for r in quarantined) == sorted(r["run_id"] for r in scored)
    assert all(
        r["infra"] == {"is_infra": True, "rule": "scripted_provider_error", "detail": "overloaded"}
        for r in quarantined
    )
    assert all(r["attempt"] == 1 for r in quarantined)
    assert all(r["success"] and r["attempt"] == 2 for r in scored)
    for record in scored:
        assert (root / "runs" / record["run_id"] / "attempt-1" / "session.jsonl").is_file()
        assert (root / "runs" / record["run_id"] / "attempt-2" / "session.jsonl").is_file()


def test_consecutive_infra_failures_stop_the_experiment_resumably(tmp_path):
    exp = write_experiment(
        tmp_path,
        "down",
        condition("down", "infra_no_turn"),
        workers=1,
        max_consecutive_infra=3,
        max_attempts=5,
    )
    proc = rig(tmp_path, "run", str(exp))
    assert proc.returncode == 3
    assert "stopped after 3 infrastructure failures in a row (last: scripted_provider_error)" in proc.stderr
    assert len(read_jsonl(results(tmp_path, "down") / "quarantine.jsonl")) == 3
    assert read_jsonl(results(tmp_path, "down") / "runs.jsonl") == []
    again = rig(tmp_path, "run", str(exp))
    assert again.returncode == 3
    assert len(read_jsonl(results(tmp_path, "down") / "quarantine.jsonl")) == 6


def test_tampering_is_recorded_restored_and_scored_against_the_real_gate(tmp_path):
    exp = write_experiment(tmp_path, "tamper", condition("tamper", "tamper"), tasks=["t1_fix_pagination"])
    assert rig(tmp_path, "run", str(exp)).returncode == 0
    (record,) = read_jsonl(results(tmp_path, "tamper") / "runs.jsonl")
    assert record["protected"]["modified"] == ["scripts/check.py"]
    assert record["protected"]["deleted"] == ["tests/unit/test_errors.py"]
    assert record["protected"]["added"] == ["conftest.py", "sitecustomize.py", "tests/unit/test_fake.py"]
    assert not record["success"]
    assert record["check"]["failed"] == ["pytest"]


def test_tampering_with_a_node_pack_is_recorded_restored_and_scored_against_the_real_gate(tmp_path):
    (task,) = load_tasks(load_pack(NOTES_JS), ["t1_fix_pagination"])
    exp = write_experiment(
        tmp_path, "tamper_js", condition("tamper", "tamper"), tasks=[task.id], pack=str(NOTES_JS)
    )
    proc = rig(tmp_path, "run", str(exp))
    assert proc.returncode == 0, proc.stderr
    (record,) = read_jsonl(results(tmp_path, "tamper_js") / "runs.jsonl")
    # The gate script faked, a visible test deleted and a fake one added, npm's and node's startup
    # files planted: each recorded, and undone before the rig's own gate and hidden tests ran. The
    # planted node_modules/ is recorded as one tree: the rig's copy leaves it out, so it never runs.
    assert record["protected"]["modified"] == ["scripts/check.mjs"]
    assert record["protected"]["deleted"] == ["test/api/health-users.test.mjs"]
    assert record["protected"]["added"] == [".npmrc", "node_modules", "test/api/fake.test.mjs"]
    assert not record["success"]
    assert record["check"]["failed"] == task.spec.baseline.fails_stages
    assert not record["metrics"]["ran_check_script"] and not record["metrics"]["ran_tests"]


def test_a_node_packs_run_is_judged_by_its_own_gate_tests_and_docs(tmp_path):
    exp = write_experiment(
        tmp_path, "solution_js", condition("sol", "solution"), tasks=["t1_fix_pagination"], pack=str(NOTES_JS)
    )
    proc = rig(tmp_path, "run", str(exp))
    assert proc.returncode == 0, proc.stderr
    (record,) = read_jsonl(results(tmp_path, "solution_js") / "runs.jsonl")
    assert record["success"], record
    metrics = record["metrics"]
    assert metrics["bash_commands"][-1] == "npm run check"
    assert metrics["ran_check_script"] and metrics["docs_read"] == ["AGENTS.md"]
    assert not metrics["ran_tests"] and not metrics["ran_pytest"]


def test_verification_timeout_is_a_record_not_a_crash(tmp_path):
    exp = write_experiment(
        tmp_path,
        "slowcheck",
        condition("sol", "solution"),
        tasks=["t1_fix_pagination"],
        timeouts={"agent_s": 60, "stall_s": 30, "check_s": 0.05},
    )
    assert rig(tmp_path, "run", str(exp)).returncode == 0
    (record,) = read_jsonl(results(tmp_path, "slowcheck") / "runs.jsonl")
    assert not record["success"]
    assert record["check"]["error"] == "the gate timed out after 0s"
    assert record["failing_stage"] == "<timeout>"


def test_nothing_saved_reveals_home_user_host_or_paths(tmp_path):
    fake_home = tmp_path / "home" / "zq_fake_user"
    fake_home.mkdir(parents=True)
    exp = write_experiment(tmp_path, "private", AGENTS_ARMS, tasks=["t2_add_endpoint"])
    env = rig_env(tmp_path, HOME=str(fake_home), USER="zq_fake_user", LOGNAME="zq_fake_user")
    env["RIG_RUNS_ROOT"] = str(fake_home / ".cache" / "rig" / "runs")
    script = f"hostname zq-fake-host && exec {RIG} run {exp}"
    proc = subprocess.run(["unshare", "--uts", "sh", "-c", script], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    secrets = ["zq_fake_user", "zq-fake-host", str(fake_home), str(REPO_ROOT), env["RIG_RUNS_ROOT"]]
    saved = [p for p in results(tmp_path, "private").rglob("*") if p.is_file()]
    assert len(saved) > 10
    for path in saved:
        text = path.read_bytes().decode(errors="replace")
        leaks = [s for s in secrets if s in text]
        assert leaks == [], (path, leaks)
    record = read_jsonl(results(tmp_path, "private") / "runs.jsonl")[0]
    assert record["success"]
    assert "<RUNS>" in json.dumps(record["agent"]["command"]) or "<REPO>" in json.dumps(
        record["agent"]["command"]
    )


def test_reclassify_reports_then_writes_only_when_asked(tmp_path):
    exp = write_experiment(tmp_path, "reclass", condition("sol", "solution"), tasks=["t1_fix_pagination"])
    assert rig(tmp_path, "run", str(exp)).returncode == 0
    root = results(tmp_path, "reclass")
    (record,) = read_jsonl(root / "runs.jsonl")
    session = root / record["artifacts"] / "session.jsonl"
    session.write_text(session.read_text().splitlines()[0] + "\n")
    before = (root / "runs.jsonl").read_text()
    shown = rig(tmp_path, "reclassify", str(exp))
    assert shown.returncode == 0
    assert (
        "runs: t1_fix_pagination__sol__r01 attempt 1: scored -> no_model_turn (metrics changed)"
        in shown.stdout
    )
    assert (root / "runs.jsonl").read_text() == before
    written = rig(tmp_path, "reclassify", str(exp), "--write")
    assert written.returncode == 0
    assert read_jsonl(root / "runs.jsonl") == []
    assert [r["infra"]["rule"] for r in read_jsonl(root / "quarantine.jsonl")] == ["no_model_turn"]
    assert rig(tmp_path, "run", str(exp)).returncode == 0
    assert [r["attempt"] for r in read_jsonl(root / "runs.jsonl")] == [2]


def test_status_counts_cells(tmp_path):
    exp = write_experiment(tmp_path, "stat", AGENTS_ARMS, tasks=["t1_fix_pagination"], repetitions=2)
    before = rig(tmp_path, "status", str(exp))
    assert before.returncode == 0
    assert "0/2" in before.stdout
    assert rig(tmp_path, "run", str(exp)).returncode == 0
    after = rig(tmp_path, "status", str(exp))
    assert after.stdout.count("2/2") == 2
    # Every run solved the task under both arms: it cannot tell them apart, and pack stats says so.
    stats = rig(tmp_path, "pack", "stats", str(exp), "--json")
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout) == [
        {
            "task": "t1_fix_pagination",
            "runs": {"agents_md": 2, "no_agents_md": 2},
            "successes": {"agents_md": 2, "no_agents_md": 2},
            "flag": CEILING,
        }
    ]
    table = rig(tmp_path, "pack", "stats", str(exp))
    assert "1 of 1 tasks cannot tell the conditions apart (t1_fix_pagination)" in table.stdout


@pytest.mark.parametrize(
    "settings, message",
    [
        ('harness = "scripted"\nworkerz = 2\n', "workerz: Extra inputs are not permitted"),
        (
            'harness = "scripted"\nrepetitions = 0\n',
            "repetitions: Input should be greater than or equal to 1",
        ),
        ('harness = "nope"\n', "harness: no harness named 'nope'; use one of scripted, pi, claude-code"),
        ("repetitions = 1\n", "harness: Field required"),
        ('harness = "scripted"\ntasks = ["t9_missing"]\n', "unknown task t9_missing"),
        ('harness = "scripted\n', "not valid TOML"),
    ],
)
def test_bad_config_is_one_clear_line_and_writes_nothing(tmp_path, settings, message):
    exp = tmp_path / "bad.toml"
    exp.write_text(settings + condition("sol", "solution"))
    proc = rig(tmp_path, "run", str(exp))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    assert not (tmp_path / "results").exists()


def test_runs_root_inside_a_repository_or_below_agents_md_is_refused(tmp_path):
    exp = write_experiment(tmp_path, "where", condition("sol", "solution"), tasks=["t1_fix_pagination"])
    inside = rig(tmp_path, "run", str(exp), env=rig_env(tmp_path, RIG_RUNS_ROOT=str(REPO_ROOT / "runs")))
    assert inside.returncode == 2 and "inside the git repository" in inside.stderr
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "AGENTS.md").write_text("be evil\n")
    below = rig(
        tmp_path, "run", str(exp), env=rig_env(tmp_path, RIG_RUNS_ROOT=str(tmp_path / "ctx" / "runs"))
    )
    assert below.returncode == 2 and "AGENTS.md would be read by the agent" in below.stderr


def test_schema_describes_the_record():
    proc = subprocess.run([RIG, "schema"], capture_output=True, text=True, timeout=60)
    schema = json.loads(proc.stdout)
    for field in ("run_id", "attempt", "success", "failing_stage", "protected", "metrics", "infra", "pins"):
        assert field in schema["properties"]


def test_condition_removing_a_missing_file_stops_with_a_clear_error(tmp_path):
    arms = condition("typo", "solution", ("AGENT.md",))
    exp = write_experiment(tmp_path, "typo", arms, tasks=["t1_fix_pagination"])
    proc = rig(tmp_path, "run", str(exp))
    # Each attempt is a rig_error record (quarantined); three in a row stop the experiment, and
    # the message carries the cause.
    assert proc.returncode == 3
    assert "remove_files entry 'AGENT.md' does not exist in the workspace" in proc.stderr
    assert read_jsonl(results(tmp_path, "typo") / "runs.jsonl") == []
    quarantined = read_jsonl(results(tmp_path, "typo") / "quarantine.jsonl")
    assert [r["infra"]["rule"] for r in quarantined] == ["rig_error"] * 3
    assert all(r["failing_stage"] == "rig_error" and "step 'prepare'" in r["rig_error"] for r in quarantined)
    folder = results(tmp_path, "typo") / quarantined[0]["artifacts"]
    assert "WorkspaceError" in (folder / "traceback.txt").read_text()


def test_every_shipped_experiment_is_valid():
    from rig.experiment.load import load_experiment

    shipped = sorted((REPO_ROOT / "experiments").glob("*.toml"))
    assert len(shipped) >= 18
    packs = set()
    for path in shipped:
        experiment = load_experiment(path)
        # Its pack loads, and names every task of the experiment, as `rig run` would require.
        pack = load_pack(experiment.pack)
        packs.add(pack.name)
        only = None if experiment.tasks == "all" else list(experiment.tasks)
        assert load_tasks(pack, only), path
        for cond in experiment.conditions:
            for skill in cond.skills:
                assert (REPO_ROOT / skill / "SKILL.md").is_file(), (path, skill)
    # The built-in pack and the JavaScript one both have experiments.
    assert packs == {load_pack().name, "notes-js"}


def test_a_skill_that_does_not_exist_is_refused(tmp_path):
    exp = write_experiment(tmp_path, "noskill", condition("sol", "solution"), tasks=["t5_migration"])
    exp.write_text(exp.read_text() + 'skills = ["tasks/t5_migration/nope"]\n')
    proc = rig(tmp_path, "run", str(exp))
    assert proc.returncode == 2
    assert "skill 'tasks/t5_migration/nope' has no SKILL.md" in proc.stderr


def test_bernoulli_policy_is_seeded_per_run(tmp_path):
    arms = condition("likely", "bernoulli", p=0.8) + condition("unlikely", "bernoulli", p=0.2)
    exp = write_experiment(
        tmp_path, "coin", arms, tasks=["t1_fix_pagination", "t4_split_constant"], repetitions=2
    )
    assert rig(tmp_path, "run", str(exp)).returncode == 0
    first = {r["run_id"]: r["success"] for r in read_jsonl(results(tmp_path, "coin") / "runs.jsonl")}
    assert len(first) == 8
    likely = sum(v for k, v in first.items() if "__likely__" in k)
    unlikely = sum(v for k, v in first.items() if "__unlikely__" in k)
    assert likely > unlikely
    again_dir = tmp_path / "again"
    again_dir.mkdir()
    again = write_experiment(
        again_dir, "coin", arms, tasks=["t1_fix_pagination", "t4_split_constant"], repetitions=2
    )
    env = rig_env(tmp_path / "again")
    assert rig(tmp_path, "run", str(again), env=env).returncode == 0
    second = {
        r["run_id"]: r["success"] for r in read_jsonl(tmp_path / "again" / "results" / "coin" / "runs.jsonl")
    }
    assert second == first


def test_relative_results_and_runs_roots_work(tmp_path):
    exp = write_experiment(tmp_path, "rel", condition("sol", "solution"), tasks=["t1_fix_pagination"])
    env = {**os.environ, "RIG_RESULTS_ROOT": "res", "RIG_RUNS_ROOT": "runs"}
    proc = subprocess.run(
        [RIG, "run", str(exp)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    (record,) = read_jsonl(tmp_path / "res" / "rel" / "runs.jsonl")
    assert record["success"] and not record["infra"]["is_infra"]


def test_an_experiment_outside_the_checkout_writes_to_rig_results_where_rig_runs(tmp_path):
    (tmp_path / "exps").mkdir()
    exp = write_experiment(
        tmp_path / "exps",
        "here",
        condition("sol", "solution"),
        tasks=["t1_fix_pagination"],
        pack="builtin:taskapp",
    )
    work = tmp_path / "work"
    work.mkdir()
    env = {**{k: v for k, v in os.environ.items() if k != "RIG_RESULTS_ROOT"}, "RIG_RUNS_ROOT": "runs"}

    def rig_here(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([RIG, *args], cwd=work, env=env, capture_output=True, text=True, timeout=300)

    proc = rig_here("run", str(exp))
    assert proc.returncode == 0, proc.stderr
    folder = work / "rig-results" / "here"
    (record,) = read_jsonl(folder / "runs.jsonl")
    assert record["success"]
    assert json.loads((folder / "experiment.json").read_text())["experiment"]["pack"] == "builtin:taskapp"
    status = rig_here("status", str(exp))
    assert status.returncode == 0, status.stderr
    assert "1/1" in status.stdout
