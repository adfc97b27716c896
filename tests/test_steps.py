"""Each step of a run alone, on a real workspace: prepared from the fixture, worked on by the scripted
agent, then collected, protected and verified by the step functions without the runner."""

import dataclasses
import platform
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version as dist_version
from pathlib import Path

import pytest
from builtin_pack import FIXTURE_DIR

from harnesses.protocol import HarnessAdapter
from harnesses.registry import make_adapter
from rig.packs.tasks import load_tasks
from rig.run.steps.agent import agent
from rig.run.steps.attempt import Attempt, Trail
from rig.run.steps.collect import Collected, collect
from rig.run.steps.prepare import Prepared, prepare
from rig.run.steps.protect import protect
from rig.run.steps.verify import verify
from rig.schema import AgentRun, Condition, Experiment, Limits, Pins, PlanItem, SandboxStatus, Task
from rig.verify.audit import toolchain_digest
from rig.version import rig_version
from rig.workspace.build import tree_digest
from rig.workspace.scratch import Scratch

TASK = "t1_fix_pagination"
SOURCE = "taskapp/utils/pagination.py"
VISIBLE_TEST = "tests/unit/test_pagination.py"
# The task's baseline: check.py fails at pytest and this hidden test fails.
BASELINE_HIDDEN = "test_pagination_hidden::test_exact_multiple_last_page"


@pytest.fixture(scope="module")
def task() -> Task:
    return load_tasks(only=[TASK])[0]


@pytest.fixture(scope="module")
def pins(task: Task) -> Pins:
    """What the audit compares the rig's own files with, pinned as rig.run.runner.make_context does."""
    return Pins(
        rig_version=rig_version(),
        fixture_hash=tree_digest(FIXTURE_DIR),
        task_hash=tree_digest(task.dir),
        hidden_tests_hash=tree_digest(task.hidden_dir),
        harness_version="scripted",
        python_version=platform.python_version(),
        ruff_version=dist_version("ruff"),
        pytest_version=dist_version("pytest"),
        toolchain_hash=toolchain_digest(),
    )


def attempt_in(root: Path, task: Task, pins: Pins, condition: Condition) -> Attempt:
    """Attempt 1 of run r1 of `task` under `condition`, its workspace under `root`/runs and its
    folder under `root`/results, as rig.run.runner.attempt_of makes it."""
    folder = root / "results" / "runs" / "r1" / "attempt-1"
    return Attempt(
        experiment=Experiment(name="steps", harness="scripted", conditions=[condition]),
        item=PlanItem(run_id="r1", task=task.id, condition=condition.name, repetition=1),
        task=task,
        condition=condition,
        pins=pins,
        sandbox=SandboxStatus(mode="off", active=False),
        number=1,
        folder=folder,
        artifacts="runs/r1/attempt-1",
        started=datetime.now(UTC),
        workspaces=root / "runs",
        scratch=Scratch(root / "copies", None, "a folder of the test"),
        secrets=[FIXTURE_DIR, task.dir, task.hidden_dir],
    )


@dataclass
class Worked:
    """One attempt's folders and the outputs of prepare and agent, made by the steps themselves."""

    root: Path
    attempt: Attempt
    trail: Trail
    adapter: HarnessAdapter
    prepared: Prepared
    run: AgentRun
    visible_test: bytes
    """The protected test as prepared, before the agent ran."""

    @property
    def folder(self) -> Path:
        return self.attempt.folder


def worked(root: Path, task: Task, pins: Pins, commands: list[str] | None) -> Worked:
    """Prepare a workspace and run the scripted agent in it: `commands` in its shell, None for none."""
    options = {"policy": "script", "commands": commands} if commands else {"policy": "nothing"}
    attempt = attempt_in(root, task, pins, Condition(name="c", harness_options=options))
    trail = Trail()
    prepared = prepare(attempt, trail=trail)
    visible_test = (prepared.workdir / VISIBLE_TEST).read_bytes()
    attempt.folder.mkdir(parents=True)
    adapter = make_adapter("scripted", task)
    run = agent(attempt, adapter=adapter, workdir=prepared.workdir)
    return Worked(root, attempt, trail, adapter, prepared, run, visible_test)


def collected(at: Worked, limits: Limits | None = None, room: int | None = None) -> Collected:
    """The collect step with copies under the attempt's root: on disk, or bounded by `room` bytes."""
    attempt = dataclasses.replace(
        at.attempt,
        experiment=at.attempt.experiment.model_copy(update={"limits": limits or Limits()}),
        scratch=Scratch(at.root / "copies", room, "a folder of the test"),
    )
    return collect(attempt, trail=at.trail, adapter=at.adapter, run=at.run, prepared=at.prepared)


def test_prepare_makes_a_baseline_workspace_on_the_trail(tmp_path, task, pins):
    trail = Trail()
    prepared = prepare(attempt_in(tmp_path, task, pins, Condition(name="c")), trail=trail)
    assert trail.trees == [prepared.container] and prepared.container.parent == tmp_path / "runs"
    assert trail.baseline == prepared.baseline and len(prepared.baseline) == 40
    assert (prepared.workdir / ".git").is_dir() and prepared.rig_git.is_dir()
    assert VISIBLE_TEST in prepared.snapshot.files


def test_collect_reports_a_changed_file_and_writes_its_diff(tmp_path, task, pins):
    at = worked(tmp_path, task, pins, [f"echo '# changed by the agent' >> {SOURCE}"])
    result = collected(at)
    assert result.changed == [f"M {SOURCE}"]
    diff = (at.folder / "diff.patch").read_text()
    assert f"+++ b/{SOURCE}" in diff and "+# changed by the agent" in diff
    assert (result.verify_dir / SOURCE).read_text().endswith("# changed by the agent\n")
    assert result.workspace.limit is None and result.workspace.files > 0
    assert SOURCE in result.paths and result.audit == []
    assert result.metrics == at.trail.metrics and result.workspace == at.trail.workspace
    assert at.trail.trees == [at.prepared.container, result.verify_root]
    assert result.verify_root.parent == tmp_path / "copies" and at.trail.warnings == []


def test_a_copy_without_room_is_made_again_on_disk(tmp_path, task, pins):
    at = worked(tmp_path, task, pins, None)
    result = collected(at, room=1)
    assert result.verify_root.parent == tmp_path / "runs"
    assert at.trail.trees == [at.prepared.container, result.verify_root]
    assert not any((tmp_path / "copies").iterdir())
    (warning,) = at.trail.warnings
    assert warning.startswith("no room to copy the workspace") and "made again on disk" in warning
    assert result.changed == [] and (at.folder / "diff.patch").read_text() == ""


def test_collect_stops_at_a_workspace_limit(tmp_path, task, pins):
    at = worked(tmp_path, task, pins, [f"echo '# changed' >> {SOURCE}"])
    result = collected(at, limits=Limits(max_files=10))
    assert result.workspace.limit is not None and "max_files" in result.workspace.limit
    assert result.changed == [] and result.audit == []
    assert not (at.folder / "diff.patch").exists()


def test_protect_restores_a_modified_protected_file_in_the_copy(tmp_path, task, pins):
    commands = [f"echo 'assert True' >> {VISIBLE_TEST}", "echo 'x = 1' > tests/conftest.py"]
    at = worked(tmp_path, task, pins, commands)
    result = collected(at)
    tampering = protect(at.prepared, collected=result)
    assert tampering.modified == [VISIBLE_TEST] and tampering.added == ["tests/conftest.py"]
    assert tampering.deleted == []
    assert (result.verify_dir / VISIBLE_TEST).read_bytes() == at.visible_test
    assert not (result.verify_dir / "tests" / "conftest.py").exists()
    # Only the rig's copy is restored: the agent's workspace is evidence, left as it was.
    assert (at.prepared.workdir / VISIBLE_TEST).read_bytes() != at.visible_test


def test_verify_on_the_unfixed_baseline_fails_the_check_at_pytest_and_the_hidden_tests(tmp_path, task, pins):
    at = worked(tmp_path, task, pins, None)
    result = collected(at)
    protect(at.prepared, collected=result)
    verified = verify(at.attempt, trail=at.trail, collected=result)
    assert verified.error is None and at.trail.step == "hidden"
    assert verified.check is not None and not verified.check.ok and verified.check.failed[0] == "pytest"
    assert verified.hidden is not None and not verified.hidden.ok
    assert BASELINE_HIDDEN in verified.hidden.failed
    assert (at.folder / "check.json").is_file() and (at.folder / "hidden-junit.xml").is_file()
