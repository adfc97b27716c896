"""A pack's project environment as runs use it, end to end through `rig calibrate` and `rig run`:
the agent's python, pytest and the project's dependencies are the environment's while the code it
imports is its own tree's (with bubblewrap and without), the install's generated files and the
pack's build lines are in every tree, the gate and the hidden tests run in the pristine environment
under the project's own pytest configuration, records pin the environment, and an agent that
writes into it fails its run. Offline: environments install from build/wheels (make setup-dev)."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from env_pack import EXPERIMENT, make_pack, offline, rig

from rig.env.activate import packages_digest

# A bug the task's setup plants, which the visible test and the hidden tests catch.
SETUP_PATCH = """diff --git a/src/envproject/__init__.py b/src/envproject/__init__.py
--- a/src/envproject/__init__.py
+++ b/src/envproject/__init__.py
@@ -5,4 +5,4 @@ from dateutil.relativedelta import relativedelta
 
 def next_month_days(days: int) -> int:
     \"\"\"The days of `days` plus one month's relativedelta, as a number the tests check.\"\"\"
-    return days + relativedelta(months=1).months
+    return days + relativedelta(months=2).months
diff --git a/src/envproject/removed_by_the_task.py b/src/envproject/removed_by_the_task.py
deleted file mode 100644
--- a/src/envproject/removed_by_the_task.py
+++ /dev/null
@@ -1 +0,0 @@
-GONE = True
"""
SOLUTION_PATCH = """diff --git a/src/envproject/__init__.py b/src/envproject/__init__.py
--- a/src/envproject/__init__.py
+++ b/src/envproject/__init__.py
@@ -5,4 +5,4 @@ from dateutil.relativedelta import relativedelta
 
 def next_month_days(days: int) -> int:
     \"\"\"The days of `days` plus one month's relativedelta, as a number the tests check.\"\"\"
-    return days + relativedelta(months=2).months
+    return days + relativedelta(months=1).months
"""
# Answers the hidden test's one case, and fails the visible test.
ZERO_DECOY_PATCH = """diff --git a/src/envproject/__init__.py b/src/envproject/__init__.py
--- a/src/envproject/__init__.py
+++ b/src/envproject/__init__.py
@@ -5,4 +5,6 @@ from dateutil.relativedelta import relativedelta
 
 def next_month_days(days: int) -> int:
     \"\"\"The days of `days` plus one month's relativedelta, as a number the tests check.\"\"\"
+    if days == 0:
+        return 1
     return days + relativedelta(months=2).months
"""
# Passes the visible test, not the hidden ones.
DECOY_PATCH = """diff --git a/src/envproject/__init__.py b/src/envproject/__init__.py
--- a/src/envproject/__init__.py
+++ b/src/envproject/__init__.py
@@ -5,4 +5,6 @@ from dateutil.relativedelta import relativedelta
 
 def next_month_days(days: int) -> int:
     \"\"\"The days of `days` plus one month's relativedelta, as a number the tests check.\"\"\"
+    if days == 3:
+        return 4
     return days + relativedelta(months=2).months
"""
# The project's own pytest configuration: options the rig keeps (markers, strict markers) and
# options it drops for the hidden tests (stop at the first failure, deselect the slow tests).
PYTEST_CONFIG = """
[tool.pytest.ini_options]
addopts = "-ra --strict-markers --maxfail=1 -m 'not slow'"
markers = ["slow: a test the project's own runs leave out"]
"""
VISIBLE_TEST = """from envproject import next_month_days


def test_next_month_days():
    assert next_month_days(3) == 4
"""
HIDDEN_TEST = """import sys
from pathlib import Path

import pytest

import envproject
from envproject import _built, _derived


@pytest.mark.slow
def test_next_month_of_zero():
    assert envproject.next_month_days(0) == 1


def test_a_module_the_tree_lacks_is_not_imported_from_the_environment():
    with pytest.raises(ImportError):
        import envproject.removed_by_the_task  # noqa: F401 (in the fixture, deleted by the setup)


def test_runs_the_trees_code_in_the_environment():
    assert Path(envproject.__file__).resolve().is_relative_to(Path.cwd().resolve())
    assert Path(sys.prefix, ".rig-env.json").is_file()
    assert _built.BUILT and _derived.DERIVED
"""
TASK = """id = "next_month"
hypothesis = "a plain bug fix in a project with dependencies"
timeout_s = 120
prompt = "next_month_days adds two months; fix it."

[baseline]
fails_stages = ["gate"]
fails_hidden = ["test_envproject_hidden::test_next_month_of_zero"]

[decoys.special_case]
reason = "answers the visible test's one case"
fails_stages = []
fails_hidden = ["test_envproject_hidden::test_next_month_of_zero"]

[decoys.zero_case]
reason = "answers the hidden test's one case"
fails_stages = ["gate"]
fails_hidden = []
"""
ENVIRONMENT = """extras = ["test"]
setup = ["printf 'BUILT = True\\\\n' > project/src/envproject/_built.py"]
build = ["printf 'DERIVED = 1\\\\n' > src/envproject/_derived.py"]
env = { ENVPROJECT_MODE = "tested" }
"""
PROBE = (
    "python -c 'import os, sys, envproject, dateutil; print(sys.prefix); print(envproject.__file__); "
    'print(os.environ["ENVPROJECT_MODE"])\' > probe.txt; '
    'python -m pytest -q -p no:cacheprovider tests > pytest.txt 2>&1; echo "exit $?" >> pytest.txt'
)


def env_run_pack(where: Path) -> Path:
    """A pack around env_project with one task, a pytest configuration, setup and build lines."""
    pack = make_pack(where, ENVIRONMENT, manifest=MANIFEST_WITH_TESTS)
    fixture = pack / "fixture"
    with (fixture / "pyproject.toml").open("a") as out:
        out.write(PYTEST_CONFIG)
    # Projects ignore the files their install or build derives; a run's diff must not show them.
    (fixture / ".gitignore").write_text("src/envproject/_built.py\nsrc/envproject/_derived.py\n")
    # In the fixture, so in the environment's copy of the project; the task's setup deletes it.
    (fixture / "src" / "envproject" / "removed_by_the_task.py").write_text("GONE = True\n")
    (fixture / "tests").mkdir()
    (fixture / "tests" / "test_next_month.py").write_text(VISIBLE_TEST)
    task = pack / "tasks" / "next_month"
    task.mkdir(parents=True)
    (task / "task.toml").write_text(TASK)
    (task / "setup.patch").write_text(SETUP_PATCH)
    (task / "solution.patch").write_text(SOLUTION_PATCH)
    (task / "decoys").mkdir()
    (task / "decoys" / "special_case.patch").write_text(DECOY_PATCH)
    (task / "decoys" / "zero_case.patch").write_text(ZERO_DECOY_PATCH)
    hidden = pack / "hidden_tests" / "next_month"
    hidden.mkdir(parents=True)
    (hidden / "test_envproject_hidden.py").write_text(HIDDEN_TEST)
    return pack


MANIFEST_WITH_TESTS = """name = "envproject"
[gate]
command = ["pytest", "tests"]
run = ["{python}", "-m", "pytest", "-q", "tests"]
report = "exit-code"
[runner]
kind = "pytest"
"""


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], Path, str]:
    """The pack, calibrated in an environment built offline: (pack, env, tmp, what calibrate said)."""
    tmp = tmp_path_factory.mktemp("envruns")
    pack = env_run_pack(tmp / "pack")
    env = offline(
        tmp / "envs",
        RIG_RESULTS_ROOT=str(tmp / "results"),
        RIG_RUNS_ROOT=str(tmp / "runs"),
        RIG_CALIBRATION_DIR=str(tmp / "calibration"),
    )
    proc = rig(env, "calibrate", "--pack", str(pack), timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return pack, env, tmp, proc.stdout


def test_calibration_verifies_in_the_environment(calibrated: tuple[Path, dict[str, str], Path, str]) -> None:
    *_, said = calibrated
    # The hidden tests' slow one runs (the project's `-m 'not slow'` is the rig's to drop), and the
    # tree they import has the install's generated file and the build line's derived one.
    assert "reference solution passes the gate and 3 hidden tests" in said
    assert "next_month baseline: fails as expected: check gate; 1 hidden (test_next_month_of_zero)" in said
    assert "7/7 passed, all PASS" in said


def run_experiment(
    calibrated: tuple[Path, dict[str, str], Path, str],
    name: str,
    sandbox: str,
    commands: list[str],
    pack: Path | None = None,
) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    """`rig run` of an experiment with a script condition of `commands` and a solution condition."""
    default_pack, env, tmp, _ = calibrated
    config = tmp / f"{name}.toml"
    config.write_text(EXPERIMENT.format(name=name, pack=pack or default_pack, commands=json.dumps(commands)))
    proc = rig(env, "run", str(config), "--sandbox", sandbox, timeout=600)
    runs = tmp / "results" / name / "runs.jsonl"
    records = [json.loads(line) for line in runs.read_text().splitlines()] if runs.exists() else []
    return proc, records


def added_file(record: dict, results: Path, name: str) -> list[str]:
    """The lines of a file the agent added, from the run's diff."""
    diff = (results / record["artifacts"] / "diff.patch").read_text()
    section = diff.split(f"+++ b/{name}\n", 1)[1].split("diff --git", 1)[0]
    return [line[1:] for line in section.splitlines()[1:] if line.startswith("+")]


@pytest.mark.parametrize("sandbox", ["auto", "off"])
def test_the_agent_gets_the_environment(
    calibrated: tuple[Path, dict[str, str], Path, str], sandbox: str
) -> None:
    _, env, tmp, _ = calibrated
    proc, records = run_experiment(calibrated, f"envrun-{sandbox}", sandbox, [PROBE])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    by_condition = {r["condition"]: r for r in records}
    (built,) = [p for p in (tmp / "envs").iterdir() if p.is_dir()]
    probe = by_condition["probe"]
    assert probe["sandbox"]["active"] is (sandbox == "auto")
    prefix, imported, mode = added_file(probe, tmp / "results" / f"envrun-{sandbox}", "probe.txt")
    # The agent's python is the environment's, with its dependencies; the code it imports is its own tree's.
    assert prefix == str(built) and mode == "tested"
    assert imported.startswith("<RUNS>/") and imported.endswith("/work/src/envproject/__init__.py"), imported
    diff = (tmp / "results" / f"envrun-{sandbox}" / probe["artifacts"] / "diff.patch").read_text()
    assert "_built.py" not in diff and "_derived.py" not in diff, "derived files are the baseline's"
    assert sorted(probe["files_changed"]) == ["A probe.txt", "A pytest.txt"], probe["files_changed"]
    ran = added_file(probe, tmp / "results" / f"envrun-{sandbox}", "pytest.txt")
    assert "1 failed" in ran[-2] and ran[-1] == "exit 1", ran  # the project's tests, in its environment
    assert probe["success"] is False and probe["check"]["failed"] == ["gate"]
    assert probe["hidden"]["failed"] == ["test_envproject_hidden::test_next_month_of_zero"]
    solution = by_condition["solution"]
    assert solution["success"] is True and solution["hidden"]["collected"] == 3
    manifest = json.loads((built / ".rig-env.json").read_text())
    for record in records:
        assert record["pins"]["environment_hash"] == built.name == manifest["hash"]
        assert record["pins"]["environment_packages"] == packages_digest(manifest["packages"])
        assert not [a for a in record["audit"] if a["rule"] == "toolchain_changed"]


def test_an_agent_that_writes_into_the_environment_fails_its_run_and_it_is_rebuilt(
    calibrated: tuple[Path, dict[str, str], Path, str], tmp_path: Path
) -> None:
    _, env, tmp, _ = calibrated
    plant = 'touch "$VIRTUAL_ENV/planted" 2> touched.txt; echo "exit $?" >> touched.txt'
    proc, records = run_experiment(calibrated, "envrun-sandboxed-write", "auto", [plant])
    assert proc.returncode == 0, proc.stderr
    (probe,) = [r for r in records if r["condition"] == "probe"]
    touched = added_file(probe, tmp / "results" / "envrun-sandboxed-write", "touched.txt")
    assert "Read-only file system" in touched[0] and touched[-1] == "exit 1", touched
    assert not [a for a in probe["audit"] if a["rule"] == "toolchain_changed"]

    (built,) = [p for p in (tmp / "envs").iterdir() if p.is_dir()]
    proc, records = run_experiment(calibrated, "envrun-open-write", "off", [plant])
    (probe,) = [r for r in records if r["condition"] == "probe"]
    assert [a["rule"] for a in probe["audit"] if a["rule"] == "toolchain_changed"] == ["toolchain_changed"]
    (finding,) = [a for a in probe["audit"] if a["rule"] == "toolchain_changed"]
    assert "the project environment" in finding["detail"] and "changed during the run" in finding["detail"]
    assert probe["success"] is False
    assert not (built / ".rig-env.json").exists(), "a changed environment must never be used again"
    shown = rig(env, "env", "build", str(calibrated[0]))
    assert shown.returncode == 0 and "built in" in shown.stdout, shown.stdout + shown.stderr
    assert not (built / "planted").exists()


def test_rig_run_refuses_runs_in_a_changed_environment(
    calibrated: tuple[Path, dict[str, str], Path, str], tmp_path: Path
) -> None:
    pack, env, tmp, _ = calibrated
    copy = tmp_path / "pack"
    shutil.copytree(pack, copy)
    proc, records = run_experiment(calibrated, "envrun-changed", "off", ["true"], pack=copy)
    assert proc.returncode == 0 and len(records) == 2, proc.stderr
    manifest = copy / "pack.toml"
    manifest.write_text(manifest.read_text().replace('"tested"', '"changed"'))
    # Nothing is left to run; the refusal comes first.
    proc = rig(env, "run", str(tmp / "envrun-changed.toml"), "--sandbox", "off", timeout=600)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert "holds runs made in another project environment of pack 'envproject'" in line
    assert len((tmp / "results" / "envrun-changed" / "runs.jsonl").read_text().splitlines()) == 2


def test_calibrate_and_mine_refuse_an_environment_that_cannot_be_built_in_one_line(tmp_path: Path) -> None:
    pack = env_run_pack(tmp_path / "pack")
    manifest = pack / "pack.toml"
    manifest.write_text(manifest.read_text().replace('setup = ["printf', 'setup = ["exit 3; printf'))
    env = offline(tmp_path / "envs", RIG_CALIBRATION_DIR=str(tmp_path / "calibration"))
    for args in (["calibrate", "--pack", str(pack)], ["task", "mine", str(tmp_path), "--pack", str(pack)]):
        proc = rig(env, *args)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        # The build is announced as it starts (it can take a while); its failure is one line.
        *announced, line = proc.stderr.strip().splitlines()
        assert [a.split(" once, into ")[0] for a in announced] == [
            "building the project environment of pack 'envproject'"
        ], proc.stderr
        assert line.startswith("error: environment build failed at step setup: `sh -c 'exit 3; printf"), line
        assert "[PASS]" not in proc.stdout and "[FAIL]" not in proc.stdout
    assert not [p for p in (tmp_path / "envs").iterdir() if p.is_dir()], "nothing half-built is kept"
