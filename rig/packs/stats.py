"""`rig pack stats`: which of a pack's tasks told the conditions apart in a real experiment.

A task every run solved (a ceiling) or no run solved (a floor) carries no information about the
conditions: every arm scores the same on it, whatever they change. Users drop such tasks (or make
them harder or easier) before the next experiment, where the runs they cost can go to tasks that
discriminate.
"""

from rig.schema import Cell, TaskStats

CEILING = "ceiling: every run solved it"
FLOOR = "floor: no run solved it"


def task_stats(cells: list[Cell]) -> list[TaskStats]:
    """Per task, from `rig status`'s cells: runs and successes per condition and the flag of a task
    whose scored runs all agree (None while a task has no scored run)."""
    by_task: dict[str, TaskStats] = {}
    for cell in cells:
        stats = by_task.setdefault(cell.task, TaskStats(task=cell.task, runs={}, successes={}, flag=None))
        stats.runs[cell.condition] = cell.done
        stats.successes[cell.condition] = cell.successes
    for stats in by_task.values():
        runs, wins = sum(stats.runs.values()), sum(stats.successes.values())
        if runs and wins == runs:
            stats.flag = CEILING
        elif runs and wins == 0:
            stats.flag = FLOOR
    return sorted(by_task.values(), key=lambda s: s.task)
