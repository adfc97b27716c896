"""`rig run`'s preflight: what would make an experiment fail, found before anything is made.

Each check reads the machine and the experiment and writes nothing: the provider's key is set (its
value never printed), the harness CLI answers `--version`, the sandbox mode and network policy can
be enforced here, the pack matches what `rig calibrate` proved, the results folder is writable and
free, the runs root has room for the workspaces in flight, and the provider's endpoint accepts a TCP
connection (no request: nothing is billed). The first failure raises PreflightError, one line that
names the fix; what passed is returned as lines for `rig run --preflight-only`, those a user should
see on every run (a pack never calibrated here) marked.
"""

import os
import shutil
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harnesses.protocol import CliNotFound
from harnesses.registry import HarnessUnavailable, adapter_for
from rig.confine.network import NetworkError, model_url, resolve_network, unreachable_model
from rig.confine.network import endpoint_of as endpoint_of_url
from rig.confine.sandbox import SandboxError, resolve
from rig.packs.pins import load_pins, pins_path
from rig.schema import Experiment, Task
from rig.store.results import ResultsStore, StoreError
from rig.workspace.build import WorkspaceError, check_agent_root, tree_digest

# How long the provider's endpoint may take to accept a connection.
CONNECT_TIMEOUT_S = 5.0
# Free space each workspace in flight needs besides its fixture's copies (the agent's own files,
# its session and logs), and the copies of the fixture it holds (workspace, verification copy).
WORKSPACE_SLACK_BYTES = 256 * 1024 * 1024
FIXTURE_COPIES = 2


class PreflightError(Exception):
    """A check that failed: one line saying what and how to fix it."""


@dataclass(frozen=True)
class Passed:
    """A check that passed, what it found, and whether it is worth a note on every run."""

    line: str
    note: bool = False


def preflight(
    experiment: Experiment,
    tasks: list[Task],
    results_root: Path,
    runs_root: Path,
    sandbox: str,
    calibrate_hint: str,
) -> list[Passed]:
    """Run every check for `experiment` over `tasks` (of one pack); one line per check that passed
    (or was not needed). Raises PreflightError at the first failure. `calibrate_hint` is the command
    that calibrates the pack."""
    checks: list[Callable[[], Passed | str]] = [
        lambda: _key(experiment),
        lambda: _harness(experiment, tasks[0]),
        lambda: _confinement(experiment, sandbox),
        lambda: _calibration(tasks, calibrate_hint),
        lambda: _results(results_root / experiment.name),
        lambda: _space(runs_root, tasks, experiment.workers),
        lambda: _endpoint(experiment),
    ]
    return [result if isinstance(result, Passed) else Passed(result) for result in (c() for c in checks)]


def _key(experiment: Experiment) -> str:
    provider = experiment.provider
    if provider.kind == "mock" and not provider.api_key_env:
        return "key: none needed (mock model)"
    if not provider.api_key_env:
        raise PreflightError(
            f"provider {provider.name!r} names no api_key_env; set provider.api_key_env to the variable "
            "holding its key (e.g. ANTHROPIC_API_KEY)"
        )
    if not os.environ.get(provider.api_key_env):
        raise PreflightError(
            f"${provider.api_key_env} is not set (provider {provider.name or provider.kind!r}); export it "
            "in this shell, then rerun"
        )
    return f"key: ${provider.api_key_env} is set; it stays outside the agent's sandbox (rig.confine.keygate)"


def _harness(experiment: Experiment, task: Task) -> str:
    try:
        adapter = adapter_for(experiment, task)
        version = adapter.version()
    except (CliNotFound, HarnessUnavailable, ValueError) as exc:
        # CliNotFound includes HarnessVersionError: a CLI whose version cannot be read.
        raise PreflightError(f"harness {experiment.harness}: {exc}") from None
    installs = sorted({c.harness_version for c in experiment.conditions if c.harness_version})
    more = f"; {', '.join(installs)} installed when the run starts" if installs else ""
    return f"harness: {experiment.harness} {version}{more}"


def _confinement(experiment: Experiment, sandbox: str) -> str:
    try:
        plan, status = resolve(sandbox, hidden=[], exposed=[])
        _, network = resolve_network(
            experiment.network, experiment.allow, plan is not None, required=sandbox == "require"
        )
    except (SandboxError, NetworkError) as exc:
        raise PreflightError(str(exc)) from None
    problem = unreachable_model(experiment.network, experiment.provider)
    if problem:
        raise PreflightError(problem)
    return f"sandbox: {status.warning() or status.detail}; network: {network.warning() or network.detail}"


def _calibration(tasks: list[Task], hint: str) -> Passed | str:
    pack = tasks[0].pack.plain
    pins = load_pins(pack)
    if pins is None:
        return Passed(
            f"calibration: never run for pack {pack.name} on this machine ({hint} proves its oracle)", True
        )
    when = f"`rig calibrate` of {pins.calibrated_at:%Y-%m-%d %H:%M} UTC"
    if tree_digest(pack.fixture_dir) != pins.fixture_hash:
        raise PreflightError(f"pack {pack.name}: the fixture changed since {when}; rerun {hint}")
    unproved = []
    for task in tasks:
        pinned = pins.tasks.get(task.id)
        if pinned is None:
            unproved.append(task.id)
        elif tree_digest(task.dir) != pinned.task_hash:
            raise PreflightError(f"pack {pack.name}: task {task.id} changed since {when}; rerun {hint}")
        elif tree_digest(task.hidden_dir) != pinned.hidden_tests_hash:
            raise PreflightError(
                f"pack {pack.name}: the hidden tests of {task.id} changed since {when}; rerun {hint}"
            )
    if unproved:
        return Passed(
            f"calibration: {', '.join(unproved)} never calibrated on this machine ({hint} proves them)", True
        )
    return f"calibration: pack {pack.name} unchanged since {when} ({pins_path(pack)})"


def _existing(path: Path) -> Path:
    """`path`, or its nearest ancestor that exists."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _results(folder: Path) -> str:
    base = _existing(folder)
    if not base.is_dir() or not os.access(base, os.W_OK | os.X_OK):
        raise PreflightError(
            f"{base}: the results folder cannot be written here; give a writable --results-root "
            "(or $RIG_RESULTS_ROOT)"
        )
    try:
        ResultsStore(folder).check_writer()
    except StoreError as exc:
        raise PreflightError(str(exc)) from None
    return f"results: {folder} writable, no other `rig run` of it"


def _space(runs_root: Path, tasks: list[Task], workers: int) -> str:
    try:
        check_agent_root(runs_root.resolve())
    except WorkspaceError as exc:
        raise PreflightError(str(exc)) from None
    fixture = tasks[0].pack.plain.fixture_dir
    size = sum(p.lstat().st_size for p in fixture.rglob("*") if p.is_file() and not p.is_symlink())
    need = workers * (FIXTURE_COPIES * size + WORKSPACE_SLACK_BYTES)
    base = _existing(runs_root)
    free = shutil.disk_usage(base).free
    if free < need:
        raise PreflightError(
            f"{base}: {_mib(free)} free, the {workers} workspaces in flight need about {_mib(need)}; "
            "free space there or point $RIG_RUNS_ROOT at a roomier disk"
        )
    return f"space: {_mib(free)} free under {base}, about {_mib(need)} needed"


def _mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def endpoint_of(experiment: Experiment) -> tuple[str, int] | None:
    """The host and port of a real provider's endpoint; None for the mock or an unknown provider."""
    return endpoint_of_url(model_url(experiment.provider))


def _endpoint(experiment: Experiment) -> str:
    endpoint = endpoint_of(experiment)
    if endpoint is None:
        if experiment.provider.kind == "mock":
            return "endpoint: the mock model, started per run"
        return (
            f"endpoint: unknown for provider {experiment.provider.name!r} (set provider.base_url to check it)"
        )
    host, port = endpoint
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise PreflightError(
            f"provider endpoint {host}:{port} does not accept a connection ({reason}); check the network "
            "and provider.base_url, then rerun"
        ) from None
    return f"endpoint: {host}:{port} accepts connections"
