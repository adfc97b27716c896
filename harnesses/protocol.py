"""The harness protocol: what every adapter (pi, claude_code, codex, gemini, opencode, scripted) provides.

Steps 2 (the agent), 3 (collect: the session parse) and the record's condition mapping know which
harness ran, through this protocol only. An adapter runs its CLI in a prepared workspace and saves
the session; turning saved files into metrics is a pure function of those files, so stored sessions
can be re-parsed by later versions of the rig.

What an adapter is able to do beyond that (be driven by the mock model, realise condition factors,
report usage while it runs, install another version of its CLI) it declares as class attributes of
`HarnessBase`, as Harbor's installed agents declare their flags and capabilities: the engine reads
them, it never probes for them.
"""

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Protocol

from harnesses.factors import Factors
from harnesses.mock_model.server import WireProtocol
from rig.confine.events import FailedRequest, FinalEvent
from rig.confine.run_budget import UsageReader
from rig.confine.session_usage import SessionUsage
from rig.schema import AgentRun, Condition, Metrics, Transcript


class CliNotFound(Exception):
    """A harness CLI that is not installed; the message says how to install it."""


class HarnessAdapter(Protocol):
    """What the engine reads and calls on an adapter: its declarations (HarnessBase gives each a
    default) and its methods."""

    name: str
    calibrated: ClassVar[bool]
    mock_protocol: ClassVar[WireProtocol | None]
    factors: ClassVar[Factors]
    live_usage: ClassVar[UsageReader | None]
    session_usage: ClassVar[SessionUsage | None]
    live_cost: ClassVar[bool]
    final_event: ClassVar[FinalEvent | None]
    failed_request: ClassVar[FailedRequest | None]
    provider_retries_s: ClassVar[float]
    installs_versions: ClassVar[bool]
    usage_fields: ClassVar[frozenset[str]]
    compaction_fields: ClassVar[frozenset[str]]
    forced_compaction: ClassVar[Mapping[str, Any] | None]
    silent_after_final: ClassVar[Mapping[str, Any] | None]
    usage_folds: ClassVar[Mapping[str, str]]
    lacks: ClassVar[Mapping[str, str]]
    condition_mapping: str | None

    @classmethod
    def install_version(cls, version: str, notify: Callable[[str], None] | None = None) -> Path:
        """Install `version` of the CLI (once, into the rig's cache); return the folder it is in."""
        ...

    def version(self) -> str: ...

    def run(
        self, workdir: Path, prompt: str, condition: Condition, run_dir: Path, timeout: int
    ) -> AgentRun: ...

    def parse_session(self, run: AgentRun) -> Metrics:
        """Metrics from the saved session and streams of `run` (a pure function of the files)."""
        ...

    def infra_signature(self, run: AgentRun, metrics: Metrics) -> str | None:
        """The name of a harness-specific provider-failure signature seen in this run, if any."""
        ...

    @staticmethod
    def transcript(run: AgentRun) -> Transcript:
        """The session of `run` as steps (prompt, model turns with their tool calls and outputs,
        tokens and cost per turn): a pure function of the saved files, like parse_session, which
        names what it could not read in `gaps` rather than failing. A static method: a results
        folder copied to another machine is read without its tasks or provider."""
        ...

    def tool_pending(self, run: AgentRun) -> bool:
        """Whether the run ended while a tool call the agent started had not returned yet.

        A stalled run is the agent's own hang when a tool call was still running (scored as a
        failure), and infrastructure when the harness was waiting for the model (quarantined).
        A pure function of the saved session and streams, like parse_session.
        """
        ...


class HarnessBase:
    """The declarations every adapter class inherits, with the defaults of one that declares nothing:
    not driven by the mock, no condition factor, no usage while it runs, one version of its CLI.

    A subclass overrides what it has: `calibrated` (`rig calibrate --harness` drives it with the
    rig's mock model server) with `mock_protocol` (the mock's wire protocol it speaks, made with its
    tool map); `factors` (the condition factors it realises, harnesses.factors); `live_usage` (reads
    the usage of a model response from one event of its stdout as it runs) or `session_usage` (where
    its session files lie below the session path its `run` watches, and how to read the usage of
    each model response from their records as they grow, rig.confine.session_usage: for a CLI whose
    stdout reports usage only at the end; with neither, a run budget cannot hold it) and
    `live_cost` (whether that usage carries the harness's own cost, rig.confine.run_budget);
    `final_event` (whether one event of its stdout carries its final answer: a harness that then
    stays alive and silent is ended, rig.confine.events; None: the rule cannot hold it);
    `failed_request` (whether one event of its stdout reports a model request that failed, or a
    response: a harness that keeps retrying a provider that fails every request is ended after
    rig.confine.events.FAILED_REQUESTS_LIMIT of them in a row; None for a CLI that gives up by itself);
    `provider_retries_s` (about how long the CLI's own retries of a dead or erroring provider last,
    which `rig calibrate --harness` starts first); `installs_versions` with `install_version` (a
    condition's harness_version runs another version of its CLI); `usage_fields` and
    `compaction_fields` (the token figures and compaction metrics its parser reads from the session,
    harnesses.capabilities) with `usage_folds` (a figure the CLI does not tell apart -> the one it
    counts it in, as the mock's ledger is compared with it); `forced_compaction` (a condition's
    fields, `harness_options` and `harness_settings` among them, that make the CLI compact against
    the mock model (a Condition is made of them and a name):
    tests/test_compaction.py runs it for every harness that declares one; None where no compaction
    can be forced offline, `lacks["forced_compaction"]` then saying why); `silent_after_final` (a
    condition's fields that keep the CLI alive and silent once it has written its final answer,
    through its own extension point (a session-end hook, a plugin), the cause of that fault in the
    field: `rig calibrate --harness` checks the after-final rule with it; None where the CLI has no
    such point, `lacks["silent_after_final"]` then saying why); `lacks` (capability name -> why the
    CLI or its session lacks it: every capability a harness does not have is named there with its
    reason, which the capability table and the refusal at load say).
    """

    name: ClassVar[str]
    calibrated: ClassVar[bool] = False
    mock_protocol: ClassVar[WireProtocol | None] = None
    factors: ClassVar[Factors] = Factors()
    live_usage: ClassVar[UsageReader | None] = None
    session_usage: ClassVar[SessionUsage | None] = None
    live_cost: ClassVar[bool] = False
    final_event: ClassVar[FinalEvent | None] = None
    failed_request: ClassVar[FailedRequest | None] = None
    provider_retries_s: ClassVar[float] = 0.0
    installs_versions: ClassVar[bool] = False
    usage_fields: ClassVar[frozenset[str]] = frozenset()
    compaction_fields: ClassVar[frozenset[str]] = frozenset()
    forced_compaction: ClassVar[Mapping[str, Any] | None] = None
    silent_after_final: ClassVar[Mapping[str, Any] | None] = None
    usage_folds: ClassVar[Mapping[str, str]] = {}
    lacks: ClassVar[Mapping[str, str]] = {}
    condition_mapping: str | None = None
    """How the last run realised its condition for this harness; the runner records it."""

    @classmethod
    def install_version(cls, version: str, notify: Callable[[str], None] | None = None) -> Path:
        """Install `version` of the CLI into the rig's cache; only where `installs_versions` says so."""
        raise NotImplementedError(f"harness {cls.name!r} cannot install another version of its CLI")
