"""Where an experiment stands: done, pending and quarantined runs per task x condition cell.

Records come through rig.store.runs_cache and rig.store.migrate (older schemas migrated, a newer one refused,
the first record of a run id counted). Nothing of the results is written (only the derived cache
beside runs.jsonl, under its own lock), so status is safe beside a running experiment and works on
a read-only copy of its results.
"""

from collections import Counter

from rig.schema import Cell, PlanItem
from rig.store import runs_cache
from rig.store.results import ResultsStore


def cell_status(
    items: list[PlanItem], store: ResultsStore, max_attempts: int, stopped: bool = False
) -> list[Cell]:
    """One row per cell, by task and condition; quarantined = no scored record and no attempts left.
    `stopped`: the experiment's [stopping] rule has decided, so a run not recorded is not needed
    rather than pending.

    Raises StoreError for an unreadable results file and RecordSchemaError for a record of a newer
    rig; warns (DuplicateRunWarning) about a run id recorded twice, which counts once.
    """
    scored = runs_cache.scored(store, ["run_id", "success"])
    runs = dict(zip(scored.column("run_id").to_pylist(), scored.column("success").to_pylist(), strict=True))
    infra = Counter(runs_cache.quarantined(store).column("run_id").to_pylist())
    cells: dict[tuple[str, str], Cell] = {}
    for item in items:
        cell = cells.setdefault((item.task, item.condition), Cell(task=item.task, condition=item.condition))
        cell.planned += 1
        cell.infra_reruns += infra[item.run_id]
        if item.run_id in runs:
            cell.done += 1
            cell.successes += runs[item.run_id]
        elif infra[item.run_id] >= max_attempts:
            cell.quarantined += 1
        elif stopped:
            cell.not_needed += 1
        else:
            cell.pending += 1
    return sorted(cells.values(), key=lambda c: (c.task, c.condition))
