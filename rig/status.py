"""Where an experiment stands: done, pending and quarantined runs per task x condition cell."""

from collections import Counter

from pydantic import BaseModel

from rig.schedule import PlanItem
from rig.store import ResultsStore


class Cell(BaseModel):
    task: str
    condition: str
    planned: int = 0
    done: int = 0
    successes: int = 0
    pending: int = 0
    quarantined: int = 0
    infra_reruns: int = 0


def cell_status(items: list[PlanItem], store: ResultsStore, max_attempts: int) -> list[Cell]:
    """One row per cell, in plan order; quarantined = no scored record and no attempts left."""
    runs = {r["run_id"]: r for r in store.read_runs()}
    infra = Counter(r["run_id"] for r in store.read_quarantine())
    cells: dict[tuple[str, str], Cell] = {}
    for item in items:
        cell = cells.setdefault((item.task, item.condition), Cell(task=item.task, condition=item.condition))
        cell.planned += 1
        cell.infra_reruns += infra[item.run_id]
        if item.run_id in runs:
            cell.done += 1
            cell.successes += bool(runs[item.run_id]["success"])
        elif infra[item.run_id] >= max_attempts:
            cell.quarantined += 1
        else:
            cell.pending += 1
    return sorted(cells.values(), key=lambda c: (c.task, c.condition))
