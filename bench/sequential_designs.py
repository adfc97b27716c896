"""Which sequential test `[stopping]` uses: the candidates simulated side by side.

For each design (tasks x at most max_reps rounds, a look after every round) and each true effect
(none, and the planned one) on the power module's task model, this prints the share of simulated
experiments that found an effect (at no effect: the type I error) and the expected runs, for:

- rig's design (rig.analysis.sequential): an exact group-sequential test on the within-task
  discordant pairs, Lan-DeMets O'Brien-Fleming spending, with its futility rule;
- the anytime-valid alternative: a Beta(c, c)-mixture e-process on the same pairs, rejecting when
  E >= 1 / alpha (Ville's inequality), stopping undecided once the boundary is out of reach;
- the fixed design of max_reps repetitions, analysed by the report's exact CMH test (power only).

Run: .venv/bin/python bench/sequential_designs.py [n_sim]; the table is in docs/stopping.md.
"""

import math
import sys

import numpy as np
from scipy.special import betaln

from rig.analysis.power import _task_rates, power_success
from rig.analysis.sequential import prior_concentration, simulate_sequential

ALPHA = 0.05
DESIGNS = [  # tasks, max_reps, base rate, planned effect (also min_effect)
    (3, 12, 0.4, 0.4),
    (5, 8, 0.4, 0.3),
    (5, 12, 0.4, 0.3),
    (10, 10, 0.4, 0.2),
    (20, 6, 0.5, 0.2),
]


def e_process(
    base: float, effect: float, tasks: int, max_reps: int, min_effect: float, n_sim: int, seed: int
):
    """(rejection rate, expected runs) of the mixture e-process with curtailment."""
    rng = np.random.default_rng(seed)
    p_a, p_b = _task_rates(base, effect, tasks, 1.0, n_sim, rng)
    a = rng.random((n_sim, max_reps, tasks)) < p_a[:, None, :]
    b = rng.random((n_sim, max_reps, tasks)) < p_b[:, None, :]
    wins = np.cumsum((b & ~a).sum(2), axis=1).astype(float)
    losses = np.cumsum((a & ~b).sum(2), axis=1).astype(float)
    c = prior_concentration(min_effect)

    def log_e(w, l_):
        return betaln(c + w, c + l_) - betaln(c, c) + (w + l_) * math.log(2)

    threshold = math.log(1 / ALPHA)
    remaining = tasks * np.arange(max_reps - 1, -1, -1)
    found = log_e(wins, losses) >= threshold
    reachable = np.maximum(log_e(wins + remaining, losses), log_e(wins, losses + remaining)) >= threshold
    stops = found | ~reachable
    first = stops.argmax(axis=1)
    return float(found[np.arange(n_sim), first].mean()), float((first + 1).mean()) * tasks * 2


def main(n_sim: int) -> None:
    print(
        "| tasks x max reps | effect | group-sequential: found / runs | e-process: found / runs "
        "| fixed: power / runs |"
    )
    print("| :--- | ---: | ---: | ---: | ---: |")
    for tasks, max_reps, base, planned in DESIGNS:
        for effect in (0.0, planned):
            gs = simulate_sequential(base, effect, tasks, max_reps, planned, ALPHA, n_sim, seed=1)
            e_found, e_runs = e_process(base, effect, tasks, max_reps, planned, n_sim, seed=1)
            fixed = power_success(base, effect, tasks, max_reps, alpha=ALPHA, n_sim=min(n_sim, 1000), seed=1)
            print(
                f"| {tasks} x {max_reps} | {base:.1f} -> {base + effect:.1f} | {gs.rejected:.3f} / "
                f"{gs.expected_runs:.1f} | {e_found:.3f} / {e_runs:.1f} | {fixed:.3f} / {gs.fixed_runs} |"
            )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4000)
