"""The harness protocol: what every adapter (pi, claude_code, codex, gemini, opencode, scripted) provides.

Steps 2 (the agent), 3 (collect: the session parse) and the record's condition mapping know which
harness ran, through this protocol only. An adapter runs its CLI in a prepared workspace and saves
the session; turning saved files into metrics is a pure function of those files, so stored sessions
can be re-parsed by later versions of the rig.
"""

from pathlib import Path
from typing import Protocol

from rig.schema import AgentRun, Condition, Metrics, Transcript


class CliNotFound(Exception):
    """A harness CLI that is not installed; the message says how to install it."""


class HarnessAdapter(Protocol):
    name: str

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
