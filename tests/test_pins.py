"""What a record pins, and how older records stay readable.

The rig's version names the commit it runs from; records of an older schema load through the
migrations and a newer one is refused; the design digest ignores `workers`; the harness version is
read with the node that runs the agent, and a run whose harness version cannot be read never starts.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import rig
from harnesses import cli as harness_cli
from harnesses.cli import NODE_BIN, HarnessVersionError, cli_version
from rig.analysis.load import _declared
from rig.experiment.load import load_experiment
from rig.schema import RECORD_SCHEMA_VERSION, Experiment, RunRecord
from rig.store.migrate import MIGRATIONS, RecordSchemaError, design_digest, migrate, read_runs
from rig.store.results import ResultsStore
from rig.version import git_version

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
SMALL = DATA / "results_small" / "results_small"
RIG = str(Path(sys.executable).with_name("rig"))
VERSION_RE = r"\d+\.\d+\.\d+\+g[0-9a-f]{12}(\.dirty\.[0-9a-f]{8})?"


def small_records() -> list[dict]:
    return [json.loads(line) for line in (SMALL / "runs.jsonl").read_text().splitlines() if line]


# -- the rig's version ------------------------------------------------------------------------


def git(root: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", "-c", "user.name=rig", "-c", "user.email=rig@example.invalid", "-C", str(root), *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout.strip()


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A git checkout with rig/ and harnesses/ committed, and a docs file outside them."""
    root = tmp_path / "checkout"
    for name in ("rig/a.py", "rig/b.py", "harnesses/h.py", "docs/readme.md"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"# {name}\n")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "one")
    return root


def test_version_names_the_commit_and_its_uncommitted_changes(checkout: Path) -> None:
    head = git(checkout, "rev-parse", "HEAD")
    clean = git_version(checkout, "1.2.3")
    assert clean == f"1.2.3+g{head[:12]}"
    # Untracked files and changes outside rig/ and harnesses/ do not change what runs.
    (checkout / "rig" / "scratch.py").write_text("x = 1\n")
    (checkout / "docs" / "readme.md").write_text("edited\n")
    assert git_version(checkout, "1.2.3") == clean
    (checkout / "rig" / "a.py").write_text("changed = 1\n")
    dirty = git_version(checkout, "1.2.3")
    assert dirty is not None and re.fullmatch(rf"1\.2\.3\+g{head[:12]}\.dirty\.[0-9a-f]{{8}}", dirty)
    (checkout / "rig" / "a.py").write_text("changed = 2\n")
    other = git_version(checkout, "1.2.3")
    assert other != dirty and other is not None and other.startswith(f"1.2.3+g{head[:12]}.dirty.")
    (checkout / "harnesses" / "h.py").unlink()
    assert git_version(checkout, "1.2.3") not in (dirty, other, clean)
    git(checkout, "add", "-A")
    git(checkout, "commit", "-q", "-m", "two")
    assert git_version(checkout, "1.2.3") == f"1.2.3+g{git(checkout, 'rev-parse', 'HEAD')[:12]}"


def test_version_outside_a_checkout_is_the_installed_release(tmp_path: Path) -> None:
    assert git_version(tmp_path, "1.2.3") is None
    broken = tmp_path / "broken"
    (broken / ".git").mkdir(parents=True)  # a .git git cannot read: a checkout, commit unknown
    assert git_version(broken, "1.2.3") == "1.2.3+unknown"


def test_this_checkout_pins_its_commit() -> None:
    release = metadata.version("rig")
    assert re.fullmatch(VERSION_RE, rig.__version__) and rig.__version__.startswith(f"{release}+g")
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert f"+g{head[:12]}" in rig.__version__
    proc = subprocess.run([RIG, "version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == rig.__version__


def test_help_does_not_compute_the_version() -> None:
    code = (
        "from typer.testing import CliRunner\n"
        "from rig.cli import app\n"
        "from rig.version import rig_version\n"
        "assert CliRunner().invoke(app, ['--help']).exit_code == 0\n"
        "print(rig_version.cache_info().currsize)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0"


# -- record schema and migrations -------------------------------------------------------------


def test_every_schema_version_has_a_migration() -> None:
    assert set(MIGRATIONS) == set(range(1, RECORD_SCHEMA_VERSION))


def test_v1_records_load_through_the_migrations() -> None:
    raw = small_records()
    assert {r["record_schema"] for r in raw} == {1}
    records = read_runs(ResultsStore(SMALL))
    assert len(records) == len(raw) == 30
    for before, after in zip(raw, records, strict=True):
        assert after["record_schema"] == RECORD_SCHEMA_VERSION
        assert after["workspace"] is None and after["rig_error"] is None
        assert after["hang"] == ("timeout" if before["timed_out"] else None)
        RunRecord.model_validate(after)  # a complete record of the current schema
    assert small_records() == raw, "reading must never rewrite the stored records"


def test_v1_migration_renames_stalled_and_names_a_timeout() -> None:
    record = small_records()[0]
    del record["record_schema"]  # the oldest records predate the field
    record["timed_out"] = True
    record["infra"] = {"is_infra": True, "rule": "stalled", "detail": "no output for 30 s"}
    original = json.loads(json.dumps(record))
    migrated = migrate(record)
    assert record == original, "migrate must not change its argument"
    assert migrated["hang"] == "timeout"
    assert migrated["infra"] == {"is_infra": True, "rule": "stalled_provider", "detail": "no output for 30 s"}
    assert migrated["record_schema"] == RECORD_SCHEMA_VERSION
    # A current record passes through unchanged.
    assert migrate(migrated) == migrated


def test_a_record_of_a_newer_rig_is_refused(tmp_path: Path) -> None:
    record = small_records()[0]
    with pytest.raises(RecordSchemaError, match=r"record_schema 99 is newer .*upgrade rig"):
        migrate({**record, "record_schema": 99})
    with pytest.raises(RecordSchemaError, match="not a schema version"):
        migrate({**record, "record_schema": "two"})
    folder = tmp_path / "exp"
    shutil.copytree(SMALL, folder)
    with (folder / "runs.jsonl").open("a") as f:
        f.write(json.dumps({**record, "run_id": "later", "record_schema": RECORD_SCHEMA_VERSION + 1}) + "\n")
    with pytest.raises(RecordSchemaError) as info:
        read_runs(ResultsStore(folder))
    message = str(info.value)
    assert "\n" not in message and str(folder / "runs.jsonl") in message and "record 31 (later)" in message


# -- the design digest ------------------------------------------------------------------------


def test_workers_are_not_part_of_the_design() -> None:
    base = {"name": "x", "harness": "scripted", "conditions": [{"name": "a"}], "repetitions": 2}
    one = Experiment.model_validate({**base, "workers": 1})
    assert Experiment.model_validate({**base, "workers": 8}).digest() == one.digest()
    assert Experiment.model_validate({**base, "repetitions": 3}).digest() != one.digest()
    assert Experiment.model_validate({**base, "seed": 1}).digest() != one.digest()


def test_a_stored_design_is_compared_under_the_current_rule() -> None:
    stored = json.loads((SMALL / "experiment.json").read_text())
    current = load_experiment(DATA / "results_small.toml")
    # The digest stored with it was computed with workers (and before [limits] existed).
    assert stored["digest"] != current.digest()
    assert design_digest(stored) == current.digest()
    changed = {**stored, "experiment": {**stored["experiment"], "repetitions": 4}}
    assert design_digest(changed) != current.digest()
    assert design_digest({"digest": "abc", "experiment": {"unknown_field": 1}}) == "abc"


def test_a_stopping_design_stored_before_the_estimand_field_asked_about_these_tasks(tmp_path: Path) -> None:
    base = {
        "name": "x",
        "harness": "scripted",
        "conditions": [{"name": "a"}, {"name": "b"}],
        "stopping": {"compare": ["a", "b"], "min_effect": 0.3},
    }
    now = Experiment.model_validate({**base, "estimand": "these_tasks"})
    assert design_digest({"experiment": base}) == now.digest()
    plain = {key: value for key, value in base.items() if key != "stopping"}
    assert design_digest({"experiment": plain}) == Experiment.model_validate(plain).digest()
    assert Experiment.model_validate(plain).estimand == "population"
    # What the analysis reads of the folder: the same question.
    (tmp_path / "experiment.json").write_text(json.dumps({"experiment": base}))
    assert _declared(tmp_path) == (["a", "b"], [], "these_tasks")


def test_resume_with_more_workers(tmp_path: Path) -> None:
    def write(workers: int) -> Path:
        path = tmp_path / "resume.toml"
        path.write_text(
            f'harness = "scripted"\ntasks = ["t1_fix_pagination"]\nworkers = {workers}\n'
            "[timeouts]\nagent_s = 60\nstall_s = 30\n"
            '[[conditions]]\nname = "nothing"\nharness_options = { policy = "nothing" }\n'
        )
        return path

    env = {
        **os.environ,
        "RIG_RESULTS_ROOT": str(tmp_path / "results"),
        "RIG_RUNS_ROOT": str(tmp_path / "runs"),
    }
    first = subprocess.run([RIG, "run", str(write(1))], capture_output=True, text=True, timeout=600, env=env)
    assert first.returncode == 0, first.stderr[-2000:]
    again = subprocess.run([RIG, "run", str(write(4))], capture_output=True, text=True, timeout=600, env=env)
    assert again.returncode == 0, again.stderr[-2000:]
    results = tmp_path / "results" / "resume"
    records = read_runs(ResultsStore(results))
    assert len(records) == 1 and re.fullmatch(VERSION_RE, records[0]["pins"]["rig_version"])
    assert [p.name for p in results.glob("runs/*/*")] == ["attempt-1"], "the recorded run ran again"


# -- the harness version ----------------------------------------------------------------------


@pytest.fixture
def node_elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A machine whose node is in a folder of its own (as under nvm), not on the scrubbed PATH."""
    real = shutil.which("node")
    if real is None:
        pytest.fail("node is not installed; `make setup` needs Node.js 20")
    folder = tmp_path / "nvm" / "bin"
    folder.mkdir(parents=True)
    (folder / "node").symlink_to(Path(real).resolve())
    monkeypatch.setenv("PATH", str(folder))
    # The scrubbed PATH no longer holds node either: only the user's PATH leads to it.
    monkeypatch.setattr(harness_cli, "BASE_PATH", str(tmp_path / "no-node-here"))
    cli_version.cache_clear()
    yield folder
    cli_version.cache_clear()


def script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_version_is_read_with_the_node_that_runs_the_agent(tmp_path: Path, node_elsewhere: Path) -> None:
    cli = script(
        tmp_path / "fake-cli", "#!/usr/bin/env node\nconsole.log('fake-cli 1.2.3 on ' + process.version)\n"
    )
    assert re.fullmatch(r"fake-cli 1\.2\.3 on v\d+\.\d+\.\d+", cli_version(cli))


@pytest.mark.slow
def test_pi_version_with_node_elsewhere(node_elsewhere: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harnesses.registry import make_adapter
    from rig.packs.tasks import load_tasks

    monkeypatch.delenv("RIG_PI_BIN", raising=False)
    assert (NODE_BIN / "pi").exists(), "the pinned Pi CLI is missing; run `make setup`"
    version = make_adapter("pi", load_tasks(only=["t1_fix_pagination"])[0]).version()
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), version


def test_a_cli_whose_version_cannot_be_read_is_an_error(tmp_path: Path) -> None:
    cli_version.cache_clear()
    broken = script(tmp_path / "broken", "#!/bin/sh\necho 'Error: Cannot find module ./dist' >&2\nexit 3\n")
    with pytest.raises(HarnessVersionError) as info:
        cli_version(broken)
    message = str(info.value)
    assert "\n" not in message and str(broken) in message and "exited 3" in message
    assert "Cannot find module" in message and "make setup" in message
    silent = script(tmp_path / "silent", "#!/bin/sh\nexit 0\n")
    with pytest.raises(HarnessVersionError, match="exited 0 with no output"):
        cli_version(silent)
    not_executable = tmp_path / "plain"
    not_executable.write_text("hello\n")
    with pytest.raises(HarnessVersionError, match="cannot start"):
        cli_version(not_executable)


def test_a_run_whose_harness_version_cannot_be_read_refuses_to_start(tmp_path: Path) -> None:
    broken = script(tmp_path / "pi", "#!/bin/sh\necho 'pi: broken install' >&2\nexit 1\n")
    exp = tmp_path / "pi_exp.toml"
    exp.write_text('harness = "pi"\ntasks = ["t1_fix_pagination"]\n[[conditions]]\nname = "plain"\n')
    env = {
        **os.environ,
        "RIG_PI_BIN": str(broken),
        "RIG_RESULTS_ROOT": str(tmp_path / "results"),
        "RIG_RUNS_ROOT": str(tmp_path / "runs"),
    }
    proc = subprocess.run([RIG, "run", str(exp)], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert "cannot read the harness version" in proc.stderr and str(broken) in proc.stderr
    assert "pi: broken install" in proc.stderr
    results = tmp_path / "results" / "pi_exp"
    assert not (results / "runs.jsonl").exists() and not (results / "runs").exists()
