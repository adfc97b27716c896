"""Capture one version of a harness CLI driven by the mock model into tests/data/<harness>/versions/<version>.

Each harness's `versions/capture.py` calls `capture` with its adapter class, its folder and the binary of a
version installed by `npm install --prefix /tmp/<harness>-<version> <package>@<version>`. The run is
the adapter's own (`run`, unchanged unless the caller's subclass drops flags a version lacks) on
t1_fix_pagination, thinking `high`, the mock serving `policy` with `USAGE` on every response. The
kept files are redacted (<RUNS>, <REPO>, <HOME>, <user>, <host>) as the harnesses' other test data.
"""

import contextlib
import json
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harnesses import cli_harness  # noqa: E402
from harnesses.cli_harness import CliHarness  # noqa: E402
from harnesses.mock_model.policy import Policy, Step, patch_command  # noqa: E402
from harnesses.mock_model.server import MockModelServer, Usage, WireProtocol  # noqa: E402
from harnesses.mock_model.session import LEDGER_FILE  # noqa: E402
from rig.packs.manifest import load_pack  # noqa: E402
from rig.packs.tasks import load_tasks  # noqa: E402
from rig.paths import REPO_ROOT  # noqa: E402
from rig.schema import AgentRun, Condition, Provider, Task  # noqa: E402
from rig.store.redact import Redactor  # noqa: E402
from rig.workspace.build import apply_patch, copy_fixture, init_baseline  # noqa: E402

TASK_ID = "t1_fix_pagination"
USAGE = Usage(input=1000, output=100, cache_read=500, cache_write=40, reasoning=20)
FINAL = "Fixed: has_next now compares with <."


def policy(task: Task) -> Policy:
    """A read, a search, a failing command, a write, the solution patch, the gate and an answer."""
    return Policy(
        "versions",
        (
            Step("read", path="AGENTS.md"),
            Step("shell", command="grep -rn 'has_next' taskapp | head -3"),
            Step("shell", command="cat does-not-exist.txt"),
            Step("write", path="NOTES.md", content="# Notes\n\nhas_next compares with <.\n"),
            Step("shell", command=patch_command(task.solution_patch.read_text())),
            Step("shell", command="python scripts/check.py"),
            Step("final", text=FINAL),
        ),
    )


def serving(served: Policy) -> Any:
    """A stand-in for harnesses.mock_model.session.mock_model serving `served` with `USAGE`."""

    @contextlib.contextmanager
    def serve(_task: Task, _options: dict[str, Any], run_dir: Path, protocol: WireProtocol) -> Iterator[str]:
        server = MockModelServer(served, usage=USAGE, protocols=[protocol]).start()
        try:
            yield server.base_url
        finally:
            server.stop()
            ledger = [asdict(e) for e in server.ledger]
            (run_dir / LEDGER_FILE).write_text(
                json.dumps({"policy": served.name, "ledger": ledger}, indent=2) + "\n"
            )

    return serve


def capture(
    adapter: type[CliHarness],
    version: str,
    binary: Path,
    kept: tuple[str, ...],
    versions: Path,
    git: bool = False,
) -> AgentRun:
    """Run `binary` (the CLI at `version`) through `adapter` and keep `kept` (besides the streams,
    the ledger and `version.json`) in `versions/<version>/`; the run. `git`: the workspace is a
    git repository, as the rig prepares it (OpenCode needs one)."""

    class Versioned(adapter):  # type: ignore[valid-type,misc]
        def cli(self) -> Path:
            return binary.absolute()

    out = versions / version
    task = load_tasks(only=[TASK_ID])[0]
    scratch = Path(tempfile.mkdtemp(prefix=f"{adapter.name}-capture-"))
    redactor = Redactor.for_machine(runs_root=scratch, repo_root=REPO_ROOT)
    default_mock = cli_harness.mock_model
    try:
        workdir = copy_fixture(load_pack().fixture_dir, scratch / "work")
        apply_patch(workdir, task.setup_patch)
        if git:
            init_baseline(workdir, scratch / "rig.git")
        run_dir = scratch / "run"
        # The base class starts the mock for every adapter: this server replaces it there.
        cli_harness.mock_model = serving(policy(task))  # type: ignore[assignment]
        harness = Versioned(task, Provider(), None, "high", 30.0)
        run = harness.run(workdir, task.spec.prompt, Condition(name="success"), run_dir, 180)
        print(f"{adapter.name} {version}: exit {run.exit_code}, {run.wall_s:.1f}s")
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        for name in (*kept, "stdout.log", "stderr.log", LEDGER_FILE):
            source = run_dir / name
            if source.is_dir():
                shutil.copytree(source, out / name)
            elif source.exists():
                (out / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, out / name)
        (out / "version.json").write_text(json.dumps({adapter.name: version}) + "\n")
        redactor.tree(out)
        return run
    finally:
        cli_harness.mock_model = default_mock
        shutil.rmtree(scratch, ignore_errors=True)
