"""Stop when the answer is known: a group-sequential test of two conditions' success.

An experiment with `[stopping]` is looked at after every completed round of repetitions (every
condition of every task once; `rig.experiment.plan` runs the rounds in order), up to max_repetitions
rounds. The test works on within-task pairs: run r of the reference arm A against run r of arm B on
the same task, run in the same block. Under "no difference" (in every task both arms succeed with
the same probability, runs independent) a discordant pair (one arm succeeded, the other failed)
favours B with probability exactly 1/2, whatever the task's difficulty, independently of which and
how many pairs are discordant. Given the numbers of discordant pairs D_1, D_2, ... of each round,
the pairs won by B are therefore a fair binomial walk under "no difference", exactly: no normal
approximation, however few tasks.

Efficacy ("effect found"): a group-sequential design on that walk. Round k's look may spend
alpha(t_k) - alpha(t_{k-1}) of the type I error, with t_k the planned share of pairs done by round
k and alpha(t) the Lan-DeMets O'Brien-Fleming spending function 2 - 2 Phi(z_{alpha/2} / sqrt(t)),
which spends almost nothing early and keeps nearly all of the fixed design's power at the last
look. The boundary of look k is the smallest |wins - losses| whose probability, over the walks that
crossed no earlier boundary, is within that budget; it is computed exactly, by recursion over the
walk's law given D_1..D_k, so it depends only on what was observed up to look k. The chance of
ever crossing is at most alpha for every sequence of D's, hence at most alpha. It is conservative
(the binomial walk is discrete): 0.03-0.04 at alpha 0.05 in simulation (docs/stopping.md).

Futility ("no effect of at least min_effect"): min_effect, taken as a difference centred on 50%
(the smallest odds ratio a difference of that size gives in any task), is theta1 on the pairs'
scale (the probability a discordant pair favours B). For "B is better by at least that in every
task" (every discordant pair favours B with probability >= theta1), a Beta(c, c) mixture of
likelihood ratios restricted to theta < theta1, over the likelihood at theta1, is a test
supermartingale; its mirror tests "A is better by at least that". When both reach 1 / alpha
(Ville's inequality: each errs with probability at most alpha, however often it looks), both are
rejected. Stopping for futility never raises the efficacy test's type I error.

Everything is a function of the records: the decision is recomputed from them whenever a record
lands, on resume and in `rig report`, and is the same each time.
"""

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from scipy.special import betainc, betaln
from scipy.stats import binom, norm

from rig.analysis.power import _task_rates
from rig.schema import PlanItem, Stopping

EFFECT = "effect found"
NO_EFFECT = "no effect of at least min_effect"
UNDECIDED = "undecided"
SPENDING = "Lan-DeMets O'Brien-Fleming"
# The least concentration of the futility prior: below Jeffreys' Beta(1/2, 1/2) it would bet
# nearly all on theta 0 or 1.
_MIN_CONCENTRATION = 0.5
# Probabilities this close to the budget count as within it (floating-point sums of binomial laws).
_TOLERANCE = 1e-12


def spent(t: float, alpha: float) -> float:
    """alpha(t): the type I error the O'Brien-Fleming-like spending function allows by time t."""
    if t <= 0:
        return 0.0
    return float(min(alpha, 2 - 2 * norm.cdf(norm.ppf(1 - alpha / 2) / math.sqrt(min(t, 1.0)))))


class Boundaries:
    """The efficacy boundaries of one experiment, computed look by look as discordant pairs come.

    `look(d, t)` takes the discordant pairs of the new round and the share of planned pairs done,
    and returns the boundary on |wins - losses| for this look (math.inf when no outcome could cross
    within the budget); call `survive` with the observed crossing to go on (the law of the walks
    that crossed is removed).
    """

    def __init__(self, alpha: float) -> None:
        self.alpha = alpha
        self.law = np.ones(1)  # probability, under no difference, of wins = 0..D on walks still going
        self.spent = 0.0
        self.budget = 0.0

    def look(self, discordant: int, t: float) -> float:
        """The boundary of the next look; `self.spent` becomes the type I error spent so far."""
        self.law = np.convolve(self.law, binom.pmf(np.arange(discordant + 1), discordant, 0.5))
        pairs = len(self.law) - 1
        self.budget = spent(t, self.alpha) - self.spent
        distance = np.abs(2 * np.arange(pairs + 1) - pairs)  # |wins - losses| of each outcome
        tail = np.cumsum(np.bincount(distance, weights=self.law, minlength=pairs + 1)[::-1])[::-1]
        # A tie (distance 0) names no better arm: the boundary is at least 1.
        within = np.flatnonzero(tail[1:] <= self.budget + _TOLERANCE) + 1
        if not len(within):
            return math.inf
        boundary = int(within[0])
        self.spent += float(tail[boundary])
        self.law = np.where(distance >= boundary, 0.0, self.law)
        return float(boundary)


def boundary_theta(min_effect: float) -> float:
    """theta1: the probability that a discordant pair favours B when B succeeds min_effect more
    often, centred on 50% (rates 0.5 - d/2 and 0.5 + d/2: the smallest odds ratio of a difference d)."""
    high, low = 0.5 + min_effect / 2, 0.5 - min_effect / 2
    return high * high / (high * high + low * low)


def prior_concentration(min_effect: float) -> float:
    """c of the futility test's Beta(c, c) prior: its standard deviation is theta1 - 1/2 (c >= 1/2)."""
    spread = boundary_theta(min_effect) - 0.5
    return max(_MIN_CONCENTRATION, (1 / (4 * spread * spread) - 1) / 2)


def log_evidence_against_effect(wins: float, losses: float, min_effect: float) -> float:
    """log E against "B better by at least min_effect" (every pair favours B w.p. >= theta1).

    The Beta(c, c) mixture restricted to theta < theta1, over the likelihood at theta1; swap wins
    and losses for its mirror, "A better by at least min_effect".
    """
    c, theta1 = prior_concentration(min_effect), boundary_theta(min_effect)
    with np.errstate(divide="ignore"):
        mixture = betaln(c + wins, c + losses) + np.log(betainc(c + wins, c + losses, theta1))
    prior = betaln(c, c) + math.log(betainc(c, c, theta1))
    return float(mixture - prior - wins * math.log(theta1) - losses * math.log(1 - theta1))


def evidence_of_no_effect(wins: int, losses: int, min_effect: float) -> float:
    """The smaller of the two E values against an effect of at least min_effect either way."""
    return math.exp(
        min(
            log_evidence_against_effect(wins, losses, min_effect),
            log_evidence_against_effect(losses, wins, min_effect),
        )
    )


def run_looks(
    wins: Iterable[int], losses: Iterable[int], planned: list[int], alpha: float, min_effect: float
) -> list[tuple[float, float, float, str]]:
    """The looks of one experiment until one decides: (boundary, alpha spent, E against
    min_effect, verdict) per look.

    `wins` and `losses` are the discordant pairs won by B and by A in each completed round, in
    order; `planned[k]` the pairs planned in round k (all rounds, so the information time of each
    look is known in advance).
    """
    boundaries = Boundaries(alpha)
    total, done, won, lost = sum(planned), 0, 0, 0
    looks = []
    for k, (wk, lk) in enumerate(zip(wins, losses, strict=False)):
        done += planned[k]
        won, lost = won + wk, lost + lk
        boundary = boundaries.look(wk + lk, done / total if total else 1.0)
        e_none = evidence_of_no_effect(won, lost, min_effect)
        if abs(won - lost) >= boundary:
            verdict = EFFECT
        elif e_none >= 1 / alpha:
            verdict = NO_EFFECT
        else:
            verdict = UNDECIDED
        looks.append((boundary, boundaries.spent, e_none, verdict))
        if verdict != UNDECIDED:
            break
    return looks


@dataclass
class Look:
    """The test after round `repetition`: the pairs so far, the boundary and the evidence."""

    repetition: int
    pairs: int
    wins: int
    """Discordant pairs won by B."""
    losses: int
    """Discordant pairs won by A."""
    boundary: float
    """An effect is found when |wins - losses| reaches it (inf: out of reach at this look)."""
    alpha_spent: float
    """Type I error spent up to this look."""
    e_no_effect: float
    """The smaller E value against an effect of at least min_effect (either way); 1/alpha decides."""
    verdict: str


@dataclass
class SequentialResult:
    """The sequential test of an experiment as its records stand."""

    stopping: Stopping
    looks: list[Look]
    rounds: int
    """Rounds planned (max_repetitions)."""
    runs_planned: int
    runs_recorded: int
    """Runs of the plan done: scored, or out of attempts."""
    verdict: str = UNDECIDED
    direction: str | None = None
    """The better condition when an effect was found."""
    stopped_at: int | None = None
    """The round whose look decided (or the last round): no new run is started after it."""
    pending: list[str] = field(default_factory=list)
    """The runs the next look waits for."""

    @property
    def runs_saved(self) -> int:
        return self.runs_planned - self.runs_recorded

    @property
    def reason(self) -> str:
        """Why it stopped, in a few words (empty while it goes on)."""
        if self.stopped_at is None:
            return ""
        look = self.looks[-1]
        if self.verdict == EFFECT:
            return (
                f"{self.direction} won {max(look.wins, look.losses)} of {look.wins + look.losses} "
                f"discordant pairs, |wins - losses| = {abs(look.wins - look.losses)} >= boundary "
                f"{look.boundary:g}"
            )
        if self.verdict == NO_EFFECT:
            return (
                f"an effect of {self.stopping.min_effect * 100:.0f} points or more either way is rejected "
                f"(E = {look.e_no_effect:.3g} >= {1 / self.stopping.alpha:.3g})"
            )
        return "the last round ended without reaching a boundary"


def sequential_result(
    stopping: Stopping, items: list[PlanItem], outcomes: dict[str, bool], exhausted: Iterable[str]
) -> SequentialResult:
    """Evaluate the looks of an experiment from its plan and records.

    `outcomes` maps the run id of each scored record to its success; `exhausted` names the runs
    that used up their attempts without one (they count as done, their pairs as missing). A round
    is complete when every run of it is done; looks are taken at complete rounds in order, so a
    round finished before an earlier one's infra rerun waits for it, and the first look that
    decides is where the experiment stops, whatever was recorded after it.
    """
    a, b = stopping.compare
    done = set(outcomes) | set(exhausted)
    rounds: dict[int, list[PlanItem]] = defaultdict(list)
    for item in items:
        rounds[item.repetition].append(item)
    order = sorted(rounds)
    runs_recorded = sum(i.run_id in done for i in items)
    result = SequentialResult(stopping, [], len(order), len(items), runs_recorded)
    wins, losses, pairs = [], [], []
    for rep in order:
        result.pending = [i.run_id for i in rounds[rep] if i.run_id not in done]
        if result.pending:
            break
        scored = [(ra, rb) for ra, rb in _pairs(rounds[rep], a, b) if ra in outcomes and rb in outcomes]
        wins.append(sum(outcomes[rb] and not outcomes[ra] for ra, rb in scored))
        losses.append(sum(outcomes[ra] and not outcomes[rb] for ra, rb in scored))
        pairs.append(len(scored))
    planned = [len(_pairs(rounds[r], a, b)) for r in order]
    looks = run_looks(wins, losses, planned, stopping.alpha, stopping.min_effect)
    for k, (boundary, alpha_spent, e_none, verdict) in enumerate(looks):
        result.looks.append(
            Look(
                order[k], sum(pairs[: k + 1]), sum(wins[: k + 1]), sum(losses[: k + 1]), boundary,
                alpha_spent, e_none, verdict,
            )
        )  # fmt: skip
    if looks and (looks[-1][3] != UNDECIDED or len(looks) == len(order)):
        last = result.looks[-1]
        result.verdict, result.stopped_at = last.verdict, last.repetition
        if last.verdict == EFFECT:
            result.direction = b if last.wins > last.losses else a
        result.pending = []
    return result


def _pairs(items: list[PlanItem], a: str, b: str) -> list[tuple[str, str]]:
    """(run of A, run of B) per task of one round that plans both."""
    by_task: dict[str, dict[str, str]] = defaultdict(dict)
    for item in items:
        by_task[item.task][item.condition] = item.run_id
    return [(runs[a], runs[b]) for runs in by_task.values() if a in runs and b in runs]


@dataclass
class SequentialPower:
    """A sequential design simulated at one true effect."""

    effect: float
    rejected: float
    """Share of experiments that found an effect (at effect 0: the type I error)."""
    no_effect: float
    """Share that concluded no effect of at least min_effect."""
    expected_runs: float
    max_runs: int
    """The most runs any simulated experiment used."""
    fixed_runs: int
    """Runs of the fixed design: every round of max_repetitions."""


def simulate_sequential(
    base_rate: float,
    effect: float,
    n_tasks: int,
    max_reps: int,
    min_effect: float,
    alpha: float = 0.05,
    n_sim: int = 400,
    seed: int = 0,
    task_spread: float = 1.0,
    n_conditions: int = 2,
) -> SequentialPower:
    """Run the sequential design on `n_sim` simulated experiments (the power module's task model).

    Each experiment: `n_tasks` logit-normal tasks (average reference rate `base_rate`, average
    difference `effect`), a look after each of up to `max_reps` rounds through `run_looks`, the
    very code `sequential_result` uses. Runs count every condition of a round (`n_conditions`, of
    which two are compared).
    """
    if n_tasks < 1 or max_reps < 1 or n_sim < 1:
        raise ValueError(f"need n_tasks, max_reps and n_sim >= 1, got {n_tasks}, {max_reps}, {n_sim}")
    if not 0 < min_effect < 1:
        raise ValueError(f"min_effect must be strictly between 0 and 1, got {min_effect:g}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be strictly between 0 and 1, got {alpha:g}")
    rng = np.random.default_rng(seed)
    p_a, p_b = _task_rates(base_rate, effect, n_tasks, task_spread, n_sim, rng)
    success_a = rng.random((n_sim, max_reps, n_tasks)) < p_a[:, None, :]
    success_b = rng.random((n_sim, max_reps, n_tasks)) < p_b[:, None, :]
    wins = (success_b & ~success_a).sum(axis=2).tolist()
    losses = (success_a & ~success_b).sum(axis=2).tolist()
    planned = [n_tasks] * max_reps
    verdicts, rounds = [], []
    for won, lost in zip(wins, losses, strict=True):
        looks = run_looks(won, lost, planned, alpha, min_effect)
        verdicts.append(looks[-1][3])
        rounds.append(len(looks))
    per_round = n_tasks * n_conditions
    return SequentialPower(
        effect=effect,
        rejected=verdicts.count(EFFECT) / n_sim,
        no_effect=verdicts.count(NO_EFFECT) / n_sim,
        expected_runs=float(np.mean(rounds)) * per_round,
        max_runs=max(rounds) * per_round,
        fixed_runs=max_reps * per_round,
    )
