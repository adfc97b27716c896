"""A run's budget as it is spent: the usage a harness reports, added up while the agent runs.

Each adapter that can be held to a `[run_budget]` declares where it reports usage while it runs.
On its stdout (`live_usage`): a reader of one JSON event, which gives the usage of a model
response if the event reports one; the meter splits the stream into lines as it arrives and asks
the reader about each. In its session file(s) as they grow (`session_usage`, for a harness whose
stdout reports usage only at the end of its turn: Codex, Gemini CLI): the supervisor reads the
new records each time the session grew (rig.confine.session_usage) and counts their usage here.
The meter sums the latest usage per response (a key the reader gives: a response reported twice,
or cumulative totals under one key, count once). Once a sum passes a limit, `stop` says which and
how far: the agent process runner (rig.confine.agent) then kills the agent as it does at a
timeout. Costs the harness does not report are priced with genai-prices for the response's
model, else for the experiment's.
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from rig.confine.events import JsonLines
from rig.schema import BudgetStop, Metrics, ModelUsage, RunBudget

# Summed float costs carry noise in their last digits (harnesses.cli_harness.COST_DIGITS).
COST_DIGITS = 9


@dataclass(frozen=True)
class LiveUsage:
    """The usage one stdout event or session record reports: `key` names the response (a later
    report with the same key replaces this one's usage; None: a response of its own), `model`
    prices it."""

    usage: ModelUsage
    key: str | None = None
    model: str | None = None


UsageReader = Callable[[dict[str, Any]], LiveUsage | None]


def tokens_of(usage: ModelUsage) -> int:
    """The tokens a budget counts: the harness's total, else every kind summed."""
    return usage.total_tokens or (
        usage.input_tokens + usage.output_tokens + usage.cache_read_tokens + usage.cache_write_tokens
    )


@cache
def _calc(model: str, input_tokens: int, output_tokens: int, read: int, write: int) -> float | None:
    import genai_prices

    try:
        calc = genai_prices.calc_price(
            genai_prices.Usage(
                # genai-prices counts cached tokens inside input_tokens; the rig's exclude them.
                input_tokens=input_tokens + read + write,
                output_tokens=output_tokens,
                cache_read_tokens=read,
                cache_write_tokens=write,
            ),
            model,
        )
    except LookupError:
        return None
    return float(calc.total_price)


def price(usage: ModelUsage, model: str | None) -> float | None:
    """The cost of `usage` by genai-prices for `model`; None if it has no price for it."""
    if not model:
        return None
    return _calc(
        model, usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens
    )


class UsageMeter(JsonLines):
    """The usage of one run against its budget, fed the agent's stdout as it arrives (read by
    `reader`; None: its stdout reports none) and the usage its session records (`count`)."""

    def __init__(self, budget: RunBudget, reader: UsageReader | None, model: str | None = None) -> None:
        super().__init__()
        self.budget = budget
        self.reader = reader
        self.model = model
        self.stop: BudgetStop | None = None
        # Per response: its tokens and cost (None: not priced).
        self._responses: dict[str, tuple[int, float | None]] = {}

    @property
    def responses(self) -> int:
        """The model responses counted so far."""
        return len(self._responses)

    @property
    def done(self) -> bool:
        """Once `stop` is set, nothing more is read."""
        return self.stop is not None

    def event(self, event: dict[str, Any]) -> None:
        """Count the usage one event reports, if any."""
        live = self.reader(event) if self.reader is not None else None
        if live is None:
            return
        self.count(live, live.key if live.key is not None else f"#{len(self._responses)}")

    def count(self, live: LiveUsage, key: str) -> None:
        """Count the usage of one response under `key`, replacing what that key held; nothing once
        stopped."""
        if self.done:
            return
        cost = live.usage.cost_usd
        if cost is None and self.budget.max_cost_usd is not None:
            cost = price(live.usage, live.model)
            if cost is None:
                cost = price(live.usage, self.model)
        self._responses[key] = (tokens_of(live.usage), cost)
        self._check()

    def _check(self) -> None:
        tokens = sum(t for t, _ in self._responses.values())
        costs = [c for _, c in self._responses.values() if c is not None]
        cost = sum(costs) if costs else None
        limits = self.budget
        if limits.max_tokens is not None and tokens > limits.max_tokens:
            self.stop = self._stop("max_tokens", limits.max_tokens, tokens, cost)
        elif limits.max_cost_usd is not None and cost is not None and cost > limits.max_cost_usd:
            self.stop = self._stop("max_cost_usd", limits.max_cost_usd, tokens, cost)

    def _stop(
        self, limit: Literal["max_tokens", "max_cost_usd"], allowed: float, tokens: int, cost: float | None
    ) -> BudgetStop:
        return BudgetStop(
            limit=limit,
            allowed=allowed,
            tokens=tokens,
            cost_usd=round(cost, COST_DIGITS) if cost is not None else None,
            responses=self.responses,
        )


def reconcile(metrics: Metrics, stop: BudgetStop) -> None:
    """Mark `metrics` incomplete where the session of an agent stopped at its run budget holds fewer
    tokens than its stream had reported: the kill can land before the harness writes the last
    responses to its session, and those must not pass for tokens never spent."""
    if metrics.total_tokens < stop.tokens:
        metrics.incomplete(
            f"stopped at the run budget after {stop.tokens} tokens streamed, of which the session holds "
            f"{metrics.total_tokens}: the responses it did not save are missing from the totals"
        )
