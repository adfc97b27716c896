"""Where an experiment stands: done, pending and quarantined runs per task x condition cell.

Only reads: records come through rig.migrate (older schemas migrated, a newer one refused, the
first record of a run id counted), and nothing is written, so status is safe beside a running
experiment and on a read-only copy of its results.
"""

from collections import Counter

from rig.migrate import read_quarantine, read_runs
from rig.models import Cell, PlanItem
from rig.store import ResultsStore


def cell_status(items: list[PlanItem], store: ResultsStore, max_attempts: int) -> list[Cell]:
    """One row per cell, by task and condition; quarantined = no scored record and no attempts left.

    Raises StoreError for an unreadable results file and RecordSchemaError for a record of a newer
    rig; warns (DuplicateRunWarning) about a run id recorded twice, which counts once.
    """
    runs = {r["run_id"]: r for r in read_runs(store)}
    infra = Counter(r["run_id"] for r in read_quarantine(store))
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
