"""An experiment's budget (`max_cost_usd`, `max_runs`): no run starts that could take it past them.

The spent cost is read from the records (scored and quarantined attempts alike: a provider bills an
attempt whether or not it was scored) and grows as each record lands. A run in flight has not been
billed yet: it counts at the estimate of one run, the mean cost of the experiment's attempts so
far (before any, the dry run's estimate). A run starts only if the spent cost plus every run in
flight, itself included, stays within `max_cost_usd`, and the scored runs plus those in flight
within `max_runs`; runs in flight always finish and are recorded.
"""

from rig.experiment.estimate import estimate, record_cost, spent
from rig.schema import Experiment
from rig.store.results import ResultsStore


class BudgetMonitor:
    """The budget of an experiment, as its records and its runs in flight stand."""

    def __init__(self, experiment: Experiment, store: ResultsStore, planned: int, pending: int) -> None:
        self.experiment = experiment
        self.planned = planned
        self.spent, self.scored, self.attempts = spent(store)
        self.prior = estimate(experiment, store, max(pending, 1)).per_run_usd or 0.0

    @property
    def per_run(self) -> float:
        """The cost one run in flight is expected to add."""
        return self.spent / self.attempts if self.attempts else self.prior

    def allows(self, in_flight: int) -> bool:
        """Whether one more run may start beside `in_flight` running ones."""
        exp = self.experiment
        if exp.max_runs is not None and self.scored + in_flight + 1 > exp.max_runs:
            return False
        return exp.max_cost_usd is None or self.spent + (in_flight + 1) * self.per_run <= exp.max_cost_usd

    def record(self, record: dict, scored: bool) -> None:
        """An attempt's record landed: its cost is spent."""
        self.spent += record_cost(record)
        self.attempts += 1
        self.scored += scored

    def stop_message(self) -> str:
        """How far the budget let the experiment get, and how to go on."""
        exp = self.experiment
        config = "the experiment's config"
        rest = self.planned - self.scored
        got = f"{self.scored} of {self.planned} runs recorded, ${self.spent:.2f} spent"
        if exp.max_runs is not None and self.scored >= exp.max_runs:
            return (
                f"stopped at the budget: {got} (max_runs = {exp.max_runs}); raise max_runs in {config} "
                f"(to {self.planned} for the {rest} runs left) and rerun to resume"
            )
        needed = self.spent + rest * self.per_run
        return (
            f"stopped at the budget: {got} (max_cost_usd = {exp.max_cost_usd:g}; about ${self.per_run:.4f} "
            f"a run); raise max_cost_usd in {config} (to about {needed:.2f} for the {rest} runs left) and "
            "rerun to resume"
        )


def budget_line(experiment: Experiment, store: ResultsStore) -> str:
    """What the experiment has spent so far against its budget, for `rig status`."""
    cost, scored, attempts = spent(store)
    line = f"spent: ${cost:.4f} over {attempts} attempts, infrastructure failures included"
    limits = []
    if experiment.max_cost_usd is not None:
        limits.append(
            f"max_cost_usd = {experiment.max_cost_usd:g} ({cost / experiment.max_cost_usd:.0%} used)"
        )
    if experiment.max_runs is not None:
        limits.append(f"max_runs = {experiment.max_runs} ({scored} scored)")
    return f"{line}; budget: {', '.join(limits) if limits else 'none'}"
