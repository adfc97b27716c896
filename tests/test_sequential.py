"""Stopping when the answer is known (`[stopping]`, rig.analysis.sequential), by simulation and end to end.

The promise: simulated A/A experiments with a look after every round reject at no more than alpha,
within Monte Carlo error; a planted effect stops early with the power `rig power` promises; a
planted effect of exactly min_effect is called "no effect" at no more than alpha; and `rig run`
stops a real experiment once decided, records why, the report shows the runs saved and a resume
starts nothing. The simulations send every experiment through `sequential_result`, the code the
runner and the report call, on plan items and records as the runner keeps them; `rig power`'s
prediction (simulate_sequential) is a separate simulation of the same task model.
"""

import math

import numpy as np
import pytest
from sequential_configs import config, rig

from rig.analysis.power import _task_rates
from rig.analysis.sequential import EFFECT, NO_EFFECT, Boundaries, sequential_result, simulate_sequential
from rig.experiment.load import ExperimentError, load_experiment
from rig.experiment.plan import plan
from rig.schema import Experiment

ALPHA = 0.05


def _design(n_tasks: int, max_reps: int, min_effect: float = 0.3) -> tuple[Experiment, list]:
    experiment = Experiment.model_validate(
        {
            "name": "sim",
            "harness": "scripted",
            "conditions": [{"name": "a"}, {"name": "b"}],
            "stopping": {"compare": ["a", "b"], "min_effect": min_effect, "max_repetitions": max_reps},
        }
    )
    return experiment, plan(experiment, [f"t{t}" for t in range(n_tasks)])


def _run_experiments(
    p_a: np.ndarray, p_b: np.ndarray, max_reps: int, min_effect: float, rng: np.random.Generator
) -> tuple[list[str], list[int]]:
    """Simulated experiments through sequential_result: (verdict, runs used) of each.

    p_a and p_b hold each experiment's per-task success rates (rows: experiments). The records of an
    experiment are drawn for its whole plan; the runner would stop at the deciding look, so the runs
    it uses are those up to that round.
    """
    n_sim, n_tasks = p_a.shape
    experiment, items = _design(n_tasks, max_reps, min_effect)
    task_index = [int(i.task[1:]) for i in items]
    is_b = np.array([i.condition == "b" for i in items])
    verdicts, runs = [], []
    for row in range(n_sim):
        rates = np.where(is_b, p_b[row, task_index], p_a[row, task_index])
        success = rng.random(len(items)) < rates
        outcomes = {item.run_id: bool(s) for item, s in zip(items, success, strict=True)}
        result = sequential_result(experiment.stopping, items, outcomes, ())
        verdicts.append(result.verdict)
        runs.append(result.stopped_at * n_tasks * 2)
    return verdicts, runs


def _three_se(p: float, n: int) -> float:
    return 3 * math.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize(("n_tasks", "max_reps"), [(3, 10), (5, 8), (10, 5), (20, 3)])
def test_aa_with_a_look_after_every_round_rejects_at_most_alpha(n_tasks, max_reps) -> None:
    # Heterogeneous tasks drawn apart from the power module's model: any rate in [0.05, 0.95],
    # the same in both arms.
    n = 1000
    rng = np.random.default_rng(n_tasks)
    rates = rng.uniform(0.05, 0.95, (n, n_tasks))
    verdicts, _ = _run_experiments(rates, rates, max_reps, 0.3, rng)
    rejected = verdicts.count(EFFECT) / n
    print(f"A/A {n_tasks} tasks x {max_reps} looks: type I error {rejected:.4f}")
    assert rejected <= ALPHA + _three_se(ALPHA, n)


def test_boundaries_spend_no_more_than_alpha_for_any_discordant_counts() -> None:
    # The exact type I error given the discordant pairs of each look is what the boundaries spent:
    # never above alpha, whatever the counts (including looks with none).
    rng = np.random.default_rng(3)
    for _ in range(200):
        looks = int(rng.integers(1, 15))
        counts = rng.integers(0, 12, looks)
        boundaries = Boundaries(ALPHA)
        for k, d in enumerate(counts, start=1):
            boundaries.look(int(d), k / looks)
        assert boundaries.spent <= ALPHA + 1e-12


def test_planted_effect_stops_early_with_the_power_rig_power_promises() -> None:
    base, effect, n_tasks, max_reps = 0.4, 0.3, 5, 12
    n_predict, n = 1000, 600
    predicted = simulate_sequential(base, effect, n_tasks, max_reps, effect, ALPHA, n_predict, seed=1)
    rng = np.random.default_rng(2)
    p_a, p_b = _task_rates(base, effect, n_tasks, 1.0, n, rng)
    verdicts, runs = _run_experiments(p_a, p_b, max_reps, effect, rng)
    power = verdicts.count(EFFECT) / n
    expected_runs = float(np.mean(runs))
    print(
        f"planted effect: power {power:.4f} (rig power: {predicted.rejected:.4f}), runs {expected_runs:.1f} "
        f"(rig power: {predicted.expected_runs:.1f}) of {predicted.fixed_runs}"
    )
    se = math.sqrt(predicted.rejected * (1 - predicted.rejected) * (1 / n_predict + 1 / n))
    assert abs(power - predicted.rejected) <= 3 * se + 0.02
    assert expected_runs == pytest.approx(predicted.expected_runs, rel=0.05)
    # It stops early: about two thirds of the fixed design on average, with the power of the whole.
    assert expected_runs < 0.75 * predicted.fixed_runs and power > 0.85


def test_an_effect_of_exactly_min_effect_is_called_no_effect_at_most_alpha() -> None:
    # The futility claim "no effect of at least min_effect" is wrong here in every experiment:
    # every task has a difference of min_effect centred on 50%, the hardest case for the claim.
    min_effect, n_tasks, max_reps, n = 0.3, 10, 10, 600
    rng = np.random.default_rng(5)
    p_a = np.full((n, n_tasks), 0.5 - min_effect / 2)
    verdicts, _ = _run_experiments(p_a, 1 - p_a, max_reps, min_effect, rng)
    wrong = verdicts.count(NO_EFFECT) / n
    print(f"effect of min_effect: 'no effect' {wrong:.4f}")
    assert wrong <= ALPHA + _three_se(ALPHA, n)


def test_no_effect_is_concluded_when_there_is_none() -> None:
    result = simulate_sequential(0.5, 0.0, 10, 10, 0.3, ALPHA, 400, seed=3)
    assert result.no_effect > 0.3 and result.expected_runs < result.fixed_runs


@pytest.mark.parametrize(
    ("stopping", "message"),
    [
        (
            'compare = ["with", "nope"]\nmin_effect = 0.3',
            "stopping.compare names 'nope', which is not a condition",
        ),
        ('compare = ["with", "with"]\nmin_effect = 0.3', "compares condition 'with' with itself"),
        (
            'compare = ["with", "without"]\nmin_effect = 0.3\nalpha = 1.5',
            "stopping.alpha: Input should be less",
        ),
        ('compare = ["with", "without"]', "stopping.min_effect: Field required"),
        ('compare = ["with", "without"]\nmin_effect = 0.3\nmax_repetitions = 0', "stopping.max_repetitions"),
    ],
)
def test_a_bad_stopping_table_is_one_clear_line(tmp_path, stopping, message) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(config(f"[stopping]\n{stopping}\n", "solution"))
    with pytest.raises(ExperimentError, match=message.replace("(", r"\(")) as caught:
        load_experiment(path)
    assert "\n" not in str(caught.value)


def test_a_look_waits_for_its_rounds_reruns_and_a_run_out_of_attempts_leaves_its_pair_out() -> None:
    experiment, items = _design(2, 3)
    late = next(i.run_id for i in items if i.repetition == 1 and i.task == "t0" and i.condition == "a")
    # Rounds 1 and 2 recorded but for one run of round 1, still waiting for its infra rerun.
    outcomes = {i.run_id: i.condition == "b" for i in items if i.repetition <= 2 and i.run_id != late}
    waiting = sequential_result(experiment.stopping, items, outcomes, ())
    assert waiting.looks == [] and waiting.pending == [late] and waiting.stopped_at is None
    # It used up its attempts: round 1's look has the other task's pair only, round 2's both.
    result = sequential_result(experiment.stopping, items, outcomes, [late])
    assert [(look.repetition, look.pairs, look.wins) for look in result.looks] == [(1, 1, 1), (2, 3, 3)]
    assert result.runs_recorded == 8 and result.runs_saved == 4 and result.stopped_at is None
    assert result.pending == [i.run_id for i in items if i.repetition == 3]  # the next look's


def test_max_repetitions_makes_the_plan() -> None:
    experiment, items = _design(2, 6)
    assert experiment.repetitions == 1 and max(i.repetition for i in items) == 6 and len(items) == 24


def test_rig_power_gives_the_sequential_designs_runs(tmp_path) -> None:
    proc = rig(tmp_path, "power", "--tasks", "5", "--base-rate", "0.4", "--effect", "0.3", "--max-reps", "12")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1].startswith(
        "sequential design ([stopping]: min_effect 0.3, alpha 0.05, at most 12 repetitions"
    )
    assert lines[2].startswith("  at effect +0.30: effect found 0.9") and "at most 120 (of 120)" in lines[2]
    assert lines[3].startswith("  at no effect: effect found 0.0")
    # From an experiment's [stopping]: its tasks, conditions, alpha, min_effect and max_repetitions.
    path = tmp_path / "stop.toml"
    path.write_text(
        config(
            '[stopping]\ncompare = ["without", "with"]\nmin_effect = 0.5\nmax_repetitions = 6\n', "solution"
        )
    )
    proc = rig(tmp_path, "power", "--experiment", str(path), "--effect", "0.4", "--sims", "100")
    assert proc.returncode == 0, proc.stderr
    assert (
        "min_effect 0.5, alpha 0.05, at most 6 repetitions, 5 tasks x 2 conditions; fixed design 60"
        in proc.stdout
    )
    path.write_text(config("", "solution"))
    proc = rig(tmp_path, "power", "--experiment", str(path))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "has no [stopping] table" in proc.stderr
