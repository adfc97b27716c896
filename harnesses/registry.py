"""Which adapter runs which harness name: one table, which installed packages may extend.

A harness is an adapter class (rig.confine.agent.HarnessAdapter) in a module of its own, and one line
of BUILTIN. Another package adds a harness without touching rig through the entry-point group
`rig.harnesses`, in its pyproject.toml:

    [project.entry-points."rig.harnesses"]
    my-cli = "my_package.adapter:MyCliHarness"

Every list of harness names (experiment validation, `rig calibrate --harness`, the CLI's errors)
comes from here. An adapter class derives from harnesses.protocol.HarnessBase and is called with
the keyword arguments task, provider, model, thinking, stall_s and confinement; what it can do
(`calibrated`, `mock_protocol`, `factors`, `live_usage`, `installs_versions`, ...) it declares as
class attributes of that base. Adapter modules are imported only when an adapter is made or asked
for those attributes, so listing names imports none of them.
"""

from collections.abc import Callable
from functools import cache
from importlib import import_module
from importlib.metadata import entry_points
from pathlib import Path

from harnesses.factors import check_condition
from harnesses.mock_model.server import WireProtocol
from harnesses.protocol import HarnessAdapter, HarnessBase
from rig.confine.agent import Confinement
from rig.confine.run_budget import price
from rig.schema import (
    DEFAULT_STALL_S,
    AgentRun,
    Condition,
    Experiment,
    ModelUsage,
    Provider,
    RunBudget,
    Task,
    Transcript,
)

ENTRY_POINT_GROUP = "rig.harnesses"
BUILTIN = {
    "scripted": "harnesses.scripted.adapter:ScriptedHarness",
    "pi": "harnesses.pi.adapter:PiHarness",
    "claude-code": "harnesses.claude_code.adapter:ClaudeCodeHarness",
    "codex": "harnesses.codex.adapter:CodexHarness",
    "gemini": "harnesses.gemini.adapter:GeminiHarness",
    "opencode": "harnesses.opencode.adapter:OpenCodeHarness",
}


class HarnessUnavailable(Exception):
    """A harness name with no adapter here, or an adapter that cannot be loaded."""


@cache
def _table() -> dict[str, str]:
    """Harness name -> "module:Class": the built-in ones, then those of installed packages."""
    table = dict(BUILTIN)
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name in table and table[point.name] != point.value:
            raise HarnessUnavailable(
                f"the {ENTRY_POINT_GROUP} entry point {point.name} = {point.value!r} reuses the name of "
                f"{table[point.name]!r}; rename it in its package's pyproject.toml"
            )
        table[point.name] = point.value
    return table


def harness_names() -> tuple[str, ...]:
    """Every harness an experiment may name."""
    return tuple(_table())


def adapter_class(name: str) -> type[HarnessAdapter]:
    """The adapter class registered under `name` (its module imported now): a HarnessBase."""
    target = _table().get(name)
    if target is None:
        raise HarnessUnavailable(f"harness {name!r} has no adapter; use one of {', '.join(harness_names())}")
    module, _, attribute = target.partition(":")
    try:
        cls = getattr(import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        raise HarnessUnavailable(
            f"harness {name!r}: cannot load {target} ({exc}); reinstall its package"
        ) from exc
    # What an adapter can do is read from its declarations, which only the base class guarantees.
    if not (isinstance(cls, type) and issubclass(cls, HarnessBase)):
        raise HarnessUnavailable(
            f"harness {name!r}: {target} is not a subclass of harnesses.protocol.HarnessBase; "
            "derive the adapter from it (or from harnesses.cli_harness.CliHarness)"
        )
    return cls


def read_transcript(name: str, run: AgentRun) -> Transcript:
    """The transcript of a saved attempt of harness `name` (HarnessAdapter.transcript)."""
    return adapter_class(name).transcript(run)


def check_factors(name: str, condition: Condition) -> None:
    """Raise ValueError (one line) for a factor of `condition` harness `name` cannot realise: an
    adapter declares what it realises in its `factors` (harnesses.factors), and one that declares
    nothing realises none of them."""
    cls = adapter_class(name)
    check_condition(name, cls.factors, condition, cls.lacks)


def check_run_budget(name: str, budget: RunBudget, model: str | None) -> None:
    """Raise ValueError (one line) where harness `name` cannot be held to `budget`: neither its
    stdout nor its session reports usage while it runs (no `live_usage` nor `session_usage`
    reader), or `max_cost_usd` is asked of a harness that reports no cost while it runs (no
    `live_cost`) for a `model` genai-prices cannot price."""
    cls = adapter_class(name)
    if cls.live_usage is None and cls.session_usage is None:
        reason = cls.lacks.get("run_budget.max_tokens")
        raise ValueError(
            f"run_budget: harness {name!r} reports no usage while it runs{f' ({reason})' if reason else ''}, "
            "so no run of it can be stopped at a budget; remove [run_budget] (the experiment's "
            "max_cost_usd still applies)"
        )
    probe = ModelUsage(input_tokens=1000, output_tokens=1000)
    if budget.max_cost_usd is not None and not cls.live_cost and price(probe, model) is None:
        raise ValueError(
            f"run_budget.max_cost_usd: harness {name!r} reports no cost while it runs and genai-prices "
            f"has no price for model {model!r}; set a priced model or use run_budget.max_tokens"
        )


def calibrated_names() -> tuple[str, ...]:
    """The harnesses `rig calibrate --harness` checks: real CLIs the mock model can drive."""
    return tuple(name for name in harness_names() if adapter_class(name).calibrated)


def mock_protocols(names: tuple[str, ...] | None = None) -> list[WireProtocol]:
    """The mock's protocol of every calibrated harness of `names` (default: all of them), one per
    path: the first harness named that speaks it (the built-in ones come first), as `rig mock-model
    serve` serves them. Raises HarnessUnavailable for a name that is not a calibrated harness."""
    known = calibrated_names()
    for name in names or ():
        if name not in known:
            raise HarnessUnavailable(
                f"harness {name!r} is not driven by the mock; use one of {', '.join(known)}"
            )
    by_path: dict[str, WireProtocol] = {}
    for name in names or known:
        protocol = adapter_class(name).mock_protocol
        if protocol is None:
            raise HarnessUnavailable(f"harness {name!r} is calibrated but declares no mock_protocol")
        by_path.setdefault(protocol.path, protocol)
    return list(by_path.values())


def install_version(name: str, version: str, notify: Callable[[str], None] | None = None) -> Path:
    """Install `version` of harness `name`'s CLI (once, into the rig's cache); return its folder.

    Raises HarnessUnavailable for a harness whose adapter cannot install versions (one without an
    npm package), CliNotFound (harnesses.versions.VersionInstallError) when npm cannot install it.
    """
    cls = adapter_class(name)
    if not cls.installs_versions:
        raise HarnessUnavailable(
            f"harness {name!r} cannot run another version of its CLI; "
            "remove harness_version from its conditions"
        )
    return cls.install_version(version, notify)


def cli_names() -> tuple[str, ...]:
    """The harnesses whose CLI is an npm package pinned in harnesses/node (`rig harness install`)."""
    from harnesses.cli_harness import CliHarness

    return tuple(name for name in harness_names() if issubclass(adapter_class(name), CliHarness))


def install_cli(name: str, force: bool = False, notify: Callable[[str], None] | None = None) -> Path:
    """Install harness `name`'s pinned CLI into the rig's cache (once; again with `force`); return
    its executable. `notify` is told when the install starts.

    Raises HarnessUnavailable for a name without such a CLI and where node or npm is missing,
    CliNotFound (harnesses.versions.VersionInstallError) when npm cannot install it.
    """
    from harnesses.cli_harness import CliHarness
    from harnesses.versions import NpmMissing

    known = cli_names()
    cls = adapter_class(name) if name in known else None
    if cls is None or not issubclass(cls, CliHarness):
        raise HarnessUnavailable(f"no harness CLI named {name!r}; give one of {', '.join(known)}, or all")
    try:
        return cls.install_cli(force, notify)
    except NpmMissing as exc:
        raise HarnessUnavailable(str(exc)) from None


def harness_cache() -> Path:
    """Where the rig installs harness CLIs (harnesses.versions.cache_root): an agent's sandbox shows
    it, as it shows the checkout's pinned copies."""
    from harnesses.versions import cache_root

    return cache_root()


def make_adapter(
    name: str,
    task: Task,
    stall_s: float = DEFAULT_STALL_S,
    provider: Provider | None = None,
    model: str | None = None,
    thinking: str | None = None,
    confinement: Confinement | None = None,
    harness_version: str | None = None,
) -> HarnessAdapter:
    """A fresh adapter for one run of `task`; `thinking` is the default a condition may override.

    `confinement` (sandbox, stream and file bounds) applies to the agent process; None: defaults.
    `harness_version` (installed by `install_version` first) runs instead of the pinned CLI; the
    keyword reaches the adapter only when given, so adapters that cannot install versions need not
    take it.
    """
    extra = {"harness_version": harness_version} if harness_version else {}
    return adapter_class(name)(
        task=task,
        provider=provider or Provider(),
        model=model,
        thinking=thinking,
        stall_s=stall_s,
        confinement=confinement,
        **extra,
    )


def adapter_for(
    experiment: Experiment,
    task: Task,
    confinement: Confinement | None = None,
    harness_version: str | None = None,
) -> HarnessAdapter:
    """The experiment's harness, set up for one run of `task` (at `harness_version` if given)."""
    return make_adapter(
        experiment.harness,
        task,
        experiment.timeouts.stall_s,
        experiment.provider,
        experiment.model,
        experiment.thinking,
        confinement,
        harness_version,
    )
