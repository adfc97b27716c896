"""The workspace is hostile input: nothing an agent leaves behind hangs, crashes or slows the rig,
no escaped process touches what is verified, and an agent's own hang is scored.

Every case is a real `rig run` (a subprocess) whose scripted agent runs shell commands in a real
workspace, beside a condition that solves the task with two workers, so each test also shows that
the other run of the experiment is unaffected: it ends with its own record, a success. Each run must
end with a record, in bounded time, scored as a failure, with nothing left running and no
workspace left in the runs root.
"""

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from test_faults import RIG, is_one_line_error, rig, rig_env, stray_processes, write_experiment

from rig.run.runner import STEPS
from rig.run.steps.record import TRACEBACK_FILE
from rig.store.results import ResultsStore
from rig.workspace.scratch import choose_scratch

TASK = "t1_fix_pagination"
SOURCE = "taskapp/utils/pagination.py"
VISIBLE_TEST = "tests/unit/test_pagination.py"
# The task's baseline: check.py fails at pytest and these hidden tests fail.
BASELINE_HIDDEN = "test_pagination_hidden::test_exact_multiple_last_page"
SOLVED = {"name": "solution", "harness_options": {"policy": "solution"}}


def hostile(commands: list[str]) -> dict:
    return {"name": "hostile", "harness_options": {"policy": "script", "commands": commands}}


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def run_experiment(
    tmp_path: Path,
    name: str,
    conditions: list[dict],
    *args: str,
    env: dict[str, str] | None = None,
    bound_s: float = 180,
    leftovers: bool = False,
    **settings,
) -> tuple[dict[str, dict], list[dict]]:
    """`rig run` an experiment; (scored record per condition, quarantined records), checked sound."""
    settings.setdefault("tasks", [TASK])
    settings.setdefault("workers", 2)
    path = write_experiment(tmp_path, name, conditions, **settings)
    start = time.monotonic()
    proc = rig(tmp_path, "run", str(path), *args, env=env or rig_env(tmp_path), timeout=bound_s + 120)
    elapsed = time.monotonic() - start
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert elapsed < bound_s, f"rig run took {elapsed:.0f}s"
    root = tmp_path / "results" / name
    scored = {r["condition"]: r for r in read_jsonl(root / "runs.jsonl")}
    # Every workspace and verification copy is gone, however hostile it was (unless a process
    # that escaped all containment keeps writing into it: `leftovers`).
    runs = tmp_path / "runs" / name
    assert leftovers or not runs.exists() or list(runs.iterdir()) == []
    # Copies made in memory (rig.workspace.scratch) are gone with their experiment's folder: this results
    # folder's own, as tests running beside this one may have experiments of the same name.
    copies = choose_scratch(runs, root, workers=1)
    assert not copies.in_memory or not copies.folder.exists(), list(copies.folder.iterdir())
    return scored, read_jsonl(root / "quarantine.jsonl")


def assert_nothing_running(tmp_path: Path) -> None:
    assert stray_processes(tmp_path) == []


def assert_failed_and_other_run_unaffected(scored: dict[str, dict]) -> dict:
    record = scored["hostile"]
    assert record["success"] is False and record["failing_stage"]
    assert scored["solution"]["success"] is True, scored["solution"]["failing_stage"]
    return record


def test_fifos_where_a_protected_file_and_a_source_file_were(tmp_path):
    commands = [f"rm {VISIBLE_TEST} {SOURCE} && mkfifo {VISIBLE_TEST} {SOURCE}"]
    scored, _ = run_experiment(tmp_path, "fifo", [hostile(commands), SOLVED])
    record = assert_failed_and_other_run_unaffected(scored)
    assert sorted(record["workspace"]["special"]) == sorted([SOURCE, VISIBLE_TEST])
    # The FIFO never reached verification: the protected test was restored, the source is missing.
    assert VISIBLE_TEST in record["protected"]["deleted"] and record["check"] is not None
    assert f"D {SOURCE}" in record["files_changed"]
    assert_nothing_running(tmp_path)


@pytest.mark.parametrize("sandbox", ["auto", "off"])
def test_links_to_dev_zero_where_a_source_file_and_a_protected_file_were(tmp_path, sandbox):
    commands = [f"rm {SOURCE} {VISIBLE_TEST} && ln -s /dev/zero {SOURCE} && ln -s /dev/zero {VISIBLE_TEST}"]
    scored, _ = run_experiment(tmp_path, "zero", [hostile(commands), SOLVED], "--sandbox", sandbox)
    record = assert_failed_and_other_run_unaffected(scored)
    assert sorted(record["workspace"]["outward_links"]) == sorted([SOURCE, VISIBLE_TEST])
    assert VISIBLE_TEST in record["protected"]["deleted"]
    assert record["check"]["failed"] and record["hidden"]["failed"]
    assert_nothing_running(tmp_path)


def test_a_directory_chain_1500_levels_deep(tmp_path):
    deep = "python3 -c \"import os\nfor _ in range(1500):\n    os.mkdir('d')\n    os.chdir('d')\""
    scored, _ = run_experiment(tmp_path, "deep", [hostile([deep]), SOLVED])
    record = assert_failed_and_other_run_unaffected(scored)
    assert record["failing_stage"] == "workspace_limits" and not record["infra"]["is_infra"]
    workspace = record["workspace"]
    assert workspace["depth"] == 65 and "max_depth" in workspace["limit"]
    assert record["check"] is None and record["hidden"] is None
    assert any("workspace limits" in w for w in record["warnings"])
    assert_nothing_running(tmp_path)


def test_more_files_than_the_limit_fail_the_run_and_build_trees_are_counted_not_diffed(tmp_path):
    many = "mkdir data && cd data && seq 1 3000 | xargs touch"
    scored, _ = run_experiment(
        tmp_path, "many", [hostile([many]), SOLVED], limits={"max_files": 2000, "max_depth": 64}
    )
    record = assert_failed_and_other_run_unaffected(scored)
    assert record["failing_stage"] == "workspace_limits" and "max_files" in record["workspace"]["limit"]
    assert record["workspace"]["files"] + record["workspace"]["dirs"] == 2001

    install = "mkdir -p node_modules/pkg .venv/lib && cd node_modules/pkg && seq 1 1500 | xargs touch"
    scored, _ = run_experiment(tmp_path, "install", [hostile([install]), SOLVED])
    record = assert_failed_and_other_run_unaffected(scored)
    assert record["failing_stage"] == "pytest"
    assert record["workspace"]["excluded"] == {".git": record["workspace"]["excluded"][".git"]} | {
        "node_modules": 1502,
        ".venv": 2,
    }
    assert not [c for c in record["files_changed"] if "node_modules" in c or ".venv" in c]


ESCAPE_MARKER = "rig-hostile-escape"
# Leaves the agent's session and environment (no agent token), outlives the agent, and keeps making
# every test module it can find pass: the workspace's visible tests and, as the rig once did it,
# the hidden tests copied into the workspace for verification.
ESCAPE = (
    'setsid env -i /bin/sh -c \'while :; do for f in $(find . -name "test_*.py" 2>/dev/null); '
    'do printf "def test_ok():\\n    pass\\n" > "$f"; done; sleep 0.05; done # '
    + ESCAPE_MARKER
    + "' >/dev/null 2>&1 </dev/null &"
)


def _escaped() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if ESCAPE_MARKER.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.parametrize("containment", ["cgroup", "token-reaper"])
def test_an_escaped_process_without_the_sandbox_cannot_decide_the_verdict(tmp_path, containment):
    # token-reaper: the weakest containment (no cgroup, no PID namespace), where the process survives.
    extra = {} if containment == "cgroup" else {"RIG_CGROUP": "off", "RIG_PIDNS": "off"}
    try:
        scored, _ = run_experiment(
            tmp_path,
            "escape",
            [hostile([ESCAPE, "sleep 1"]), SOLVED],
            "--sandbox",
            "off",
            env=rig_env(tmp_path, **extra),
            leftovers=containment == "token-reaper",
        )
        survivors = _escaped()
    finally:
        for pid in _escaped():
            os.kill(pid, signal.SIGKILL)
    record = assert_failed_and_other_run_unaffected(scored)
    assert record["sandbox"]["processes"] == containment
    # Verified in a copy made after the agent, with the pristine tests: the unfixed code fails.
    assert record["failing_stage"] == "pytest"
    assert BASELINE_HIDDEN in record["hidden"]["failed"]
    if containment == "cgroup":
        assert survivors == [] and record["agent"]["leftover_processes"] >= 1
    else:
        assert survivors, "the escape was expected to outlive the token reaper"


def test_an_agents_own_hang_is_scored_and_a_silent_provider_is_infrastructure(tmp_path):
    conditions = [
        hostile(["trap '' TERM; sleep 600"]),
        {"name": "provider", "harness_options": {"policy": "stall"}},
        SOLVED,
    ]
    scored, quarantined = run_experiment(
        tmp_path,
        "hang",
        conditions,
        workers=3,
        max_attempts=1,
        max_consecutive_infra=5,
        timeouts={"agent_s": 120, "stall_s": 3},
    )
    record = assert_failed_and_other_run_unaffected(scored)
    assert record["stalled"] and record["hang"] == "agent_hang"
    assert record["failing_stage"] == "agent_hang" and not record["infra"]["is_infra"]
    (silent,) = quarantined
    assert silent["condition"] == "provider" and silent["infra"]["rule"] == "stalled_provider"
    assert silent["hang"] is None
    assert_nothing_running(tmp_path)


@pytest.mark.parametrize("step", STEPS)
def test_an_exception_in_any_step_becomes_that_runs_record(tmp_path, step):
    scored, quarantined = run_experiment(
        tmp_path,
        "fault",
        [{"name": "nothing", "harness_options": {"policy": "nothing"}}],
        env=rig_env(tmp_path, RIG_INJECT_FAULT=step),
        max_attempts=1,
        max_consecutive_infra=5,
    )
    assert scored == {}
    (record,) = quarantined
    assert record["infra"] == {
        "is_infra": True,
        "rule": "rig_error",
        "detail": f"InjectedFault in step {step!r}: fault injected in step {step!r} (RIG_INJECT_FAULT)",
    }
    assert record["failing_stage"] == "rig_error" and record["success"] is False
    folder = tmp_path / "results" / "fault" / record["artifacts"]
    assert "InjectedFault" in (folder / TRACEBACK_FILE).read_text()
    assert json.loads((folder / "record.json").read_text())["rig_error"] == record["rig_error"]
    assert_nothing_running(tmp_path)


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@contextmanager
def rig_running(tmp_path: Path, path: Path) -> Iterator[subprocess.Popen]:
    """`rig run path` in the background; killed if the test leaves it running."""
    proc = subprocess.Popen(
        [RIG, "run", str(path)],
        env=rig_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()


def assert_sigterm_stops(proc: subprocess.Popen, *roots: Path) -> None:
    """SIGTERM ends `rig run` within seconds as an interruption, and nothing it started under
    `roots` survives."""
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - start < 15 and proc.returncode == 130, err[-2000:]
    assert "interrupted" in err
    _wait_for(
        lambda: not any(stray_processes(root) for root in roots),
        10,
        "every process the run started to be gone",
    )


def test_one_writer_per_experiment_and_sigterm_stops_within_seconds(tmp_path):
    path = write_experiment(
        tmp_path,
        "busy",
        [{"name": "slow", "harness_options": {"policy": "sleep", "seconds": 120}}],
        tasks=[TASK],
        timeouts={"agent_s": 300, "stall_s": 300},
    )
    with rig_running(tmp_path, path) as first:
        holder = tmp_path / "results" / "busy" / ".writer.json"
        _wait_for(holder.exists, 120, "the first rig run to hold the experiment")
        _wait_for(lambda: stray_processes(tmp_path / "runs"), 60, "the agent to start")
        second = rig(tmp_path, "run", str(path), timeout=120)
        assert is_one_line_error(second) and second.returncode == 2, second.stderr
        assert f"already being run (pid {first.pid} on host" in second.stderr
        # Reading while it runs is allowed and writes nothing.
        assert rig(tmp_path, "status", str(path), timeout=120).returncode == 0
        assert_sigterm_stops(first, tmp_path)
    # The lock died with its holder: another runner may take the experiment now.
    ResultsStore(tmp_path / "results" / "busy").check_writer()


def test_sigterm_while_verification_hangs_stops_the_rig_and_its_verifiers(tmp_path):
    hang_on_import = "printf 'import time\\ntime.sleep(3600)\\n' >> taskapp/__init__.py"
    path = write_experiment(
        tmp_path,
        "stuck",
        [hostile([hang_on_import])],
        tasks=[TASK],
        timeouts={"agent_s": 60, "stall_s": 30, "check_s": 3600, "hidden_s": 3600},
    )
    # Where the rig makes its copies for this experiment (in memory on this machine).
    copies = choose_scratch(tmp_path / "runs" / "stuck", tmp_path / "results" / "stuck", workers=1).folder
    with rig_running(tmp_path, path) as first:
        # check.py's pytest imports taskapp in the rig's copy of the workspace, and sleeps there.
        _wait_for(
            lambda: any("check.py" in p or "pytest" in p for p in stray_processes(copies)),
            120,
            "verification to start",
        )
        assert_sigterm_stops(first, tmp_path, copies)
    # The copy in flight is removed with the run: nothing holds memory after the rig.
    assert not copies.exists()
