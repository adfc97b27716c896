"""What an experiment will cost before it runs (`rig run --dry-run`), and what a record cost.

A run's cost is its harness's own figure (`metrics.cost_usd`) when the harness reports one, else
its tokens priced with genai-prices for the model. An estimate of the runs still to go comes from
the experiment's own scored runs when it has any (their mean, with the spread they show), else
from `typical_usage.json`: tokens per task per harness (see its `source` for where the numbers come
from), priced the same way, with the wide uncertainty such a table deserves.
"""

import json
import math
import statistics
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import Any

from rig.schema import Experiment, PlanItem
from rig.store import runs_cache
from rig.store.migrate import read_quarantine
from rig.store.results import ResultsStore

TYPICAL_USAGE = Path(__file__).with_name("typical_usage.json")
TOKEN_KINDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
# A run priced per token kind from the price of this many tokens: a whole run priced as one request
# would fall into a provider's long-context tier, which no single request of the run reaches.
_PRICE_UNIT = 1000
# Estimates from the table: the true cost may be this many times lower or higher.
TABLE_FACTOR = 3.0
# Estimates from the experiment's own runs: an interval of this many standard errors.
Z_95 = 1.96


@cache
def token_prices(model: str | None, provider: str | None) -> dict[str, float] | None:
    """USD per token of each of TOKEN_KINDS for `model` by genai-prices; None if it is not priced."""
    if not model:
        return None
    import genai_prices

    def one(**usage: int) -> Decimal:
        calc = genai_prices.calc_price(genai_prices.Usage(**usage), model, provider_id=provider)
        return calc.total_price

    try:
        return {
            "input_tokens": float(one(input_tokens=_PRICE_UNIT)) / _PRICE_UNIT,
            "output_tokens": float(one(output_tokens=_PRICE_UNIT)) / _PRICE_UNIT,
            # genai-prices counts cached tokens inside input_tokens; the rig's input_tokens exclude them.
            "cache_read_tokens": float(one(input_tokens=_PRICE_UNIT, cache_read_tokens=_PRICE_UNIT))
            / _PRICE_UNIT,
            "cache_write_tokens": float(one(input_tokens=_PRICE_UNIT, cache_write_tokens=_PRICE_UNIT))
            / _PRICE_UNIT,
        }
    except LookupError:
        return None


def priced(tokens: dict[str, float], model: str | None, provider: str | None) -> float | None:
    """The cost in USD of `tokens` (by TOKEN_KINDS) for `model`; None if genai-prices has no price."""
    prices = token_prices(model, provider)
    if prices is None:
        return None
    return sum(float(tokens.get(kind) or 0) * prices[kind] for kind in TOKEN_KINDS)


def record_cost(record: dict[str, Any]) -> float:
    """What one record's attempt cost: the harness's figure, else its tokens priced, else 0."""
    metrics = record.get("metrics") or {}
    if isinstance(metrics.get("cost_usd"), int | float):
        return float(metrics["cost_usd"])
    model = metrics.get("model") or record.get("model")
    return priced(metrics, model if isinstance(model, str) else None, None) or 0.0


def spent(store: ResultsStore) -> tuple[float, int, int]:
    """The cost of every attempt recorded in `store` (scored and quarantined), the scored runs, and
    the attempts."""
    costs = run_costs(store)
    quarantined = read_quarantine(store)
    return sum(costs) + sum(record_cost(r) for r in quarantined), len(costs), len(costs) + len(quarantined)


def run_costs(store: ResultsStore) -> list[float]:
    """The cost of each scored run of `store`, in file order."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = runs_cache.scored(store, ["cost_usd", *TOKEN_KINDS, "reported_model", "model"])
    reported = table.column("cost_usd")
    costs = reported.to_pylist()
    # Only the runs whose harness reported no cost become rows to price: a dict per run costs
    # a third of a second at 100,000 runs.
    unpriced = pc.indices_nonzero(pc.fill_null(pc.is_nan(reported), True)).to_pylist()
    rows = table.take(pa.array(unpriced, type=pa.int64())).to_pylist()
    for i, row in zip(unpriced, rows, strict=True):
        costs[i] = priced(row, row["reported_model"] or row["model"], None) or 0.0
    return costs


@dataclass(frozen=True)
class Estimate:
    """The cost and wall time of the runs still to go, and how they were estimated."""

    runs: int
    per_run_usd: float | None
    """Mean cost of one run; None when nothing could price it."""
    low_usd: float | None
    high_usd: float | None
    wall_s: float | None
    """Wall time of the runs to go with the experiment's workers."""
    method: str

    @property
    def total_usd(self) -> float | None:
        return None if self.per_run_usd is None else self.per_run_usd * self.runs

    def lines(self) -> list[str]:
        """What `rig run --dry-run` prints of the estimate."""
        if self.per_run_usd is None:
            cost = "cost: not estimated"
        else:
            cost = (
                f"estimated cost of the {self.runs} runs to go: ${self.total_usd:.2f} "
                f"(${self.per_run_usd:.4f} a run; likely ${self.low_usd:.2f} to ${self.high_usd:.2f})"
            )
        wall = "" if self.wall_s is None else f"estimated wall time: {_duration(self.wall_s)}"
        return [line for line in (cost, wall, f"how: {self.method}") if line]


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


@cache
def typical_usage() -> dict[str, Any]:
    """The committed table of typical tokens and wall time per task, by harness."""
    return json.loads(TYPICAL_USAGE.read_text())


def estimate(experiment: Experiment, store: ResultsStore, runs: int) -> Estimate:
    """Estimate the cost and wall time of `runs` more runs of `experiment`, whose results are `store`."""
    table = runs_cache.scored(store, ["wall_s"])
    costs = run_costs(store)
    walls = [w for w in table.column("wall_s").to_pylist() if w is not None and not math.isnan(w)]
    workers = experiment.workers
    if costs:
        n = len(costs)
        mean = statistics.fmean(costs)
        sd = statistics.stdev(costs) if n > 1 else mean
        # The sum of `runs` new runs: their own spread plus the uncertainty of the mean itself.
        half = Z_95 * math.sqrt(runs * sd**2 + runs**2 * sd**2 / n)
        total = mean * runs
        wall = statistics.fmean(walls) * math.ceil(runs / workers) if walls else None
        method = (
            f"from this experiment's {n} scored runs (mean ${mean:.4f}, sd ${sd:.4f} a run); "
            f"the range is a 95% interval{', wide: few runs' if n < 10 else ''}"
        )
        return Estimate(runs, mean, max(0.0, total - half), total + half, wall, method)
    typical = typical_usage()
    row = typical["harnesses"].get(experiment.harness)
    if row is None:
        return Estimate(
            runs,
            None,
            None,
            None,
            None,
            f"no scored runs yet, and {TYPICAL_USAGE.name} has no row for harness {experiment.harness!r}",
        )
    provider = experiment.provider.name if experiment.provider.kind == "real" else None
    per_run = priced(row, experiment.model, provider)
    wall = row["wall_s"] * math.ceil(runs / workers)
    source = (
        f"no scored runs yet: typical tokens of one task for {experiment.harness} ({TYPICAL_USAGE.name}: "
    )
    source += typical["source"] + ")"
    if per_run is None:
        return Estimate(
            runs,
            None,
            None,
            None,
            wall,
            f"{source}; genai-prices has no price for model {experiment.model!r}",
        )
    total = per_run * runs
    method = (
        f"{source}, priced by genai-prices for {experiment.model}; "
        f"uncertain by a factor of {TABLE_FACTOR:.0f} either way"
    )
    return Estimate(runs, per_run, total / TABLE_FACTOR, total * TABLE_FACTOR, wall, method)


# Blocks of the interleaved order a dry run shows.
SHOWN_BLOCKS = 4


def dry_run(experiment: Experiment, items: list[PlanItem], store: ResultsStore) -> list[str]:
    """What `rig run --dry-run` prints: the interleaved order's first blocks, the runs per cell
    (recorded, pending), and the estimate of what the pending runs cost. Reads `store`, writes nothing."""
    from rig.experiment.status import cell_status

    size = len(experiment.conditions)
    blocks = [items[i : i + size] for i in range(0, len(items), size)]
    lines = [
        f"{experiment.name}: {len(items)} runs planned in {len(blocks)} blocks (one task, one repetition, "
        f"every condition in a seeded order); the first {min(SHOWN_BLOCKS, len(blocks))}:"
    ]
    for block in blocks[:SHOWN_BLOCKS]:
        lines.append(f"  {block[0].task} r{block[0].repetition}: " + " -> ".join(i.condition for i in block))
    cells = cell_status(items, store, experiment.max_attempts)
    width = max(len(f"{c.task} / {c.condition}") for c in cells)
    lines.append(f"  {'cell':<{width}}  planned  recorded  quarantined  to run")
    for c in cells:
        name = f"{c.task} / {c.condition}"
        lines.append(f"  {name:<{width}}  {c.planned:>7}  {c.done:>8}  {c.quarantined:>11}  {c.pending:>6}")
    pending = sum(c.pending for c in cells)
    recorded = sum(c.done for c in cells)
    lines.append(f"{recorded} runs already recorded, {pending} to run with {experiment.workers} workers")
    already, _, _ = spent(store)
    if already:
        lines.append(f"spent so far: ${already:.2f}")
    lines += estimate(experiment, store, pending).lines()
    budget = []
    if experiment.max_cost_usd is not None:
        budget.append(f"max_cost_usd = {experiment.max_cost_usd:g}")
    if experiment.max_runs is not None:
        budget.append(f"max_runs = {experiment.max_runs}")
    lines.append(
        "budget: " + (", ".join(budget) if budget else "none (set max_cost_usd in the config to cap it)")
    )
    limits = experiment.run_budget
    if limits is not None:
        caps = [f"{name} = {value:g}" for name, value in limits.model_dump().items() if value is not None]
        lines.append(f"run budget: {', '.join(caps)} (each run's agent is stopped once past it)")
    return lines
