"""The plan of an experiment: task x condition x repetition, interleaved.

Each block (one repetition of one task) holds every condition, in an order shuffled by the
experiment's seed, so provider drift over time falls on every arm alike.
"""

import random

from rig.schema import Experiment, PlanItem


def run_id(task: str, condition: str, repetition: int) -> str:
    return f"{task}__{condition}__r{repetition:02d}"


def plan(experiment: Experiment, task_ids: list[str]) -> list[PlanItem]:
    """Every run of the experiment, in execution order."""
    items = []
    for rep in range(1, experiment.planned_repetitions + 1):
        for task in task_ids:
            names = [c.name for c in experiment.conditions]
            random.Random(f"{experiment.seed}|{rep}|{task}").shuffle(names)
            items.extend(
                PlanItem(run_id=run_id(task, name, rep), task=task, condition=name, repetition=rep)
                for name in names
            )
    return items
