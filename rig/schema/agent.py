"""What the agent did: its process seen from outside, its network, its session's metrics and transcript."""

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

# --- What the agent did: its process as seen from outside, and the metrics of its session ---------


class NetworkEndpoint(BaseModel):
    """One host:port an agent's connections went to (or were refused at), with their totals."""

    host: str
    port: int
    connections: int = 0
    bytes_out: int = Field(default=0, description="bytes from the agent to the host")
    bytes_in: int = Field(default=0, description="bytes from the host to the agent")


class NetworkOutcome(BaseModel):
    """The agent's network in one run: the policy, how it was enforced, and what went through it.

    Only connections that reached the rig's egress proxy are counted (by the proxy's address or a
    model endpoint's own); a raw socket to any other port or address, and a DNS lookup, find
    nothing in the agent's network namespace and fail there, unlogged (docs/network.md).
    """

    policy: str
    active: bool = Field(description="whether the agent ran in a network namespace of its own")
    backend: str | None = Field(default=None, description="'bwrap-netns' or 'unshare-netns'; None when open")
    detail: str | None = None
    allowed: list[str] = Field(default_factory=list, description="host:port the policy let through")
    reached: list[NetworkEndpoint] = Field(default_factory=list, description="allowed connections")
    refused: list[NetworkEndpoint] = Field(
        default_factory=list, description="refused attempts per host:port (connections = attempts)"
    )
    failed: list[NetworkEndpoint] = Field(
        default_factory=list, description="allowed attempts whose host could not be reached"
    )
    log: str | None = Field(default=None, description="the proxy's log in the attempt folder")

    @property
    def refused_attempts(self) -> int:
        """How many connection attempts the policy refused."""
        return sum(e.connections for e in self.refused)

    def warning(self) -> str | None:
        """The warning every record of a run with an unconfined network carries, None when confined."""
        if self.active:
            return None
        return f"network: the agent could reach any host this machine can ({self.detail})"


class StreamStats(BaseModel):
    """How much a stream carried and how much of it the log file kept."""

    bytes: int = 0
    kept_bytes: int = 0
    truncated: bool = False


class BudgetStop(BaseModel):
    """The run budget limit an agent passed, and its usage when the rig stopped it."""

    limit: Literal["max_tokens", "max_cost_usd"]
    allowed: float = Field(description="the limit's value")
    tokens: int = Field(description="tokens the harness had reported when it was stopped")
    cost_usd: float | None = Field(description="their cost (None where no response could be priced)")
    responses: int = Field(description="model responses whose usage was counted")


class AgentRun(BaseModel):
    """What the harness did, as seen from outside: the process and where its logs are."""

    command: list[str]
    exit_code: int | None
    timed_out: bool
    stalled: bool
    wall_s: float
    session_path: Path | None
    stdout_path: Path
    stderr_path: Path
    leftover_processes: int = Field(default=0, description="agent processes still alive after it exited")
    removed_links: list[str] = Field(
        default_factory=list,
        description="symlinks out of run_dir the agent left, removed before the rig writes",
    )
    streams: dict[str, StreamStats] = Field(default_factory=dict)
    sandboxed: bool = False
    processes: str | None = Field(
        default=None,
        description="what contained every process it started: bwrap-pidns, cgroup, pidns or token-reaper",
    )
    network: NetworkOutcome | None = Field(
        default=None, description="what the agent's connections did (None when its network was not confined)"
    )
    budget: BudgetStop | None = Field(
        default=None, description="the run budget limit it passed, when the rig stopped it there"
    )
    ended_after_final: bool = Field(
        default=False,
        description="the harness streamed its final answer, then stayed alive and silent for "
        "[timeouts] after_final_s: the rig ended it, and the run is scored on its work",
    )
    failed_requests: int | None = Field(
        default=None,
        description="the model requests that had failed in a row when the rig ended a harness that "
        "kept retrying them (infrastructure); None: not ended for that",
    )


class ModelUsage(BaseModel):
    """The tokens and cost of one model within a run (the main model, a side or subagent model)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float | None = None


class Metrics(BaseModel):
    """What the session says the agent did. Every field is derived from saved files only."""

    model: str | None = None
    thinking_level: str | None = None
    assistant_messages: int = Field(
        default=0, description="model responses, as the harness records them (README: Metrics)"
    )
    tool_calls: int = 0
    tool_calls_by_name: dict[str, int] = Field(default_factory=dict)
    tool_errors: int = Field(
        default=0,
        description="tool calls whose tool did not run or reported its own failure; a command that ran "
        "and exited non-zero is not one",
    )
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float | None = None
    cost_source: str | None = Field(
        default=None,
        description="`harness` when the harness reported the cost, else how the rig priced it (e.g. "
        "`genai-prices 0.2.3`), with why it could not where cost_usd is None",
    )
    stop_reasons: list[str] = Field(default_factory=list)
    error_messages: list[str] = Field(default_factory=list)
    transport_failures: int = Field(
        default=0,
        description="failed attempts at a model request, recovered from or not: each request that "
        "errored, was cut off or lost its transport counts once, whether the harness then retried it, "
        "fell back to another transport or reconnected (Pi: errored and truncated responses, "
        "provider_transport_failure diagnostics; Claude Code: api_retry events, API-error messages; "
        "Codex: error and turn.failed events). A failure the harness recovered from (a retry, "
        "fallback or reconnect that then succeeded) never by itself makes a run infrastructure",
    )
    bash_commands: list[str] = Field(default_factory=list)
    bash_search_commands: list[str] = Field(default_factory=list)
    read_paths: list[str] = Field(default_factory=list)
    read_attempts: list[str] = Field(
        default_factory=list, description="every path a read tool was called with, failed reads included"
    )
    docs_read: list[str] = Field(default_factory=list)
    ran_check_script: bool = False
    ran_pytest: bool = False
    ran_tests: bool = Field(
        default=False, description="ran the pack's test runner (pytest, node --test, ...)"
    )
    read_skill: bool = False
    final_text: str | None = None
    complete: bool = Field(
        default=True,
        description="whether the parser read every usage figure the session should hold; False when it met "
        "a format or version it does not know, usage in an event it does not read, or no usage at all "
        "where a model responded: the token and cost fields are then a lower bound, and reports leave "
        "the run out of cost and token comparisons (its success still counts)",
    )
    gaps: list[str] = Field(
        default_factory=list,
        description="what the parser could not read, one reason each: why the metrics are incomplete, "
        "or a figure the harness version does not record while the totals and cost stay exact (e.g. "
        "no thinking count: reasoning_tokens is then 0 and the reasoning is inside output_tokens)",
    )
    per_model: dict[str, ModelUsage] = Field(
        default_factory=dict,
        description="tokens and cost per model, for every run whose model responded: where the harness "
        "records them by model, one entry each (Claude Code's modelUsage: the main model, side requests, "
        "subagents; Gemini CLI: the model each response names), the token and cost totals then their "
        "sums; else one entry, the totals, under the model the session names. Empty, with a gap, where "
        "the session names no model; empty where no model responded",
    )
    compactions: int | None = Field(
        default=None,
        description="context compactions the session records, automatic and manual (Pi: `compaction` "
        "entries; Claude Code: `compact_boundary` system messages; Codex: `compacted` rollout items or "
        "`context_compacted` events, whichever are more); None where the harness's session does not record "
        "them (README: Metrics, compaction). The three compaction_tokens fields are 0 when this is 0 and "
        "None when it is None",
    )
    compaction_tokens_before: int | None = Field(
        default=None,
        description="the context's size in tokens just before each compaction, as the harness estimated "
        "it, summed over the run's compactions (Pi: tokensBefore; Claude Code: pre_tokens); None where the "
        "session does not record it for every compaction (Codex)",
    )
    compaction_tokens_after: int | None = Field(
        default=None,
        description="the context's size in tokens just after each compaction, summed (Claude Code: "
        "post_tokens); None where the session does not record it for every compaction (Pi, Codex)",
    )
    compaction_tokens: int | None = Field(
        default=None,
        description="tokens (input, output and cache) spent by the summarization requests that made the "
        "compactions, where the session tells them apart (Codex 0.171: the `token_usage_record` each "
        "`compacted` item names; they are in the totals too); None where it does not: Pi records no usage "
        "for its summarization requests (they are then missing from the token and cost totals, and the "
        "metrics are incomplete), Claude Code counts them in its totals without telling them apart",
    )

    def add_tokens(self, usage: ModelUsage) -> None:
        """Add the tokens of one response or one model (not its cost) to the run's totals."""
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cache_read_tokens += usage.cache_read_tokens
        self.cache_write_tokens += usage.cache_write_tokens
        self.reasoning_tokens += usage.reasoning_tokens
        self.total_tokens += usage.total_tokens

    def incomplete(self, reason: str) -> None:
        """Mark the metrics incomplete for `reason` (each reason is kept once)."""
        self.complete = False
        self.unrecorded(reason)

    def unrecorded(self, reason: str) -> None:
        """Note a figure the session does not hold although the totals and cost are exact (each
        reason is kept once): the run still counts in cost and token comparisons."""
        if reason not in self.gaps:
            self.gaps.append(reason)


class TranscriptToolCall(BaseModel):
    """One tool call of a model turn, with what it returned."""

    id: str | None = None
    name: str
    arguments: dict[str, Any] | str = Field(
        default_factory=dict, description="the arguments as the harness recorded them (a string if not JSON)"
    )
    output: str | None = Field(
        default=None, description="what the tool returned; None if no result was saved"
    )
    is_error: bool | None = Field(default=None, description="None where the harness does not say")


class TranscriptStep(BaseModel):
    """One step of a session: the task's prompt (`user`), a model turn (`agent`) or a note the
    harness recorded (`system`: an error, a retry). Token counts and cost are per turn; None where
    the harness records none for it."""

    source: Literal["system", "user", "agent"]
    text: str = ""
    reasoning: str | None = None
    model: str | None = None
    tool_calls: list[TranscriptToolCall] = Field(default_factory=list)
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None
    cost_usd: float | None = None
    timestamp: str | None = None


class Transcript(BaseModel):
    """A session as a sequence of steps, read from an attempt's saved files by its harness's
    adapter: what a viewer shows and an ATIF export carries. Never stored in a record."""

    harness: str
    session_id: str | None = None
    model: str | None = None
    steps: list[TranscriptStep] = Field(default_factory=list)
    gaps: list[str] = Field(
        default_factory=list, description="what of the saved files could not be read into steps, and why"
    )
