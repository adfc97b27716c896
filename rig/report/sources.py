"""The inputs of a report: each results folder's design (experiment.json), its pack and its records."""

import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rig.packs.manifest import PackError, load_pack
from rig.report.failures import code
from rig.schema import Pack
from rig.store import runs_cache
from rig.store.migrate import DuplicateRunWarning
from rig.store.results import ResultsStore

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass
class Source:
    """One results folder: its design (experiment.json), the pack it names and its scored records,
    as the columns of `runs_cache.report_table` (records are made only of the runs that need one)."""

    folder: Path
    design: dict[str, Any]
    digest: str | None
    table: "pa.Table"
    pack: Pack | None  # None: results another tool measured (`rig import`), which no pack decided

    @property
    def imported(self) -> dict[str, Any] | None:
        """What `rig import` says of the tool these results come from; None for rig's own runs."""
        source = self.design.get("source")
        return source if isinstance(source, dict) else None

    @property
    def name(self) -> str:
        if self.design.get("name"):
            return str(self.design["name"])
        names = sorted(str(n) for n in self.distinct("experiment"))
        return names[0] if names else self.folder.name

    def distinct(self, column: str) -> list[Any]:
        """The distinct values of one of the records' columns."""
        return self.table.column(column).unique().to_pylist()


def read_source(folder: Path) -> Source:
    """The design, pack and scored records of one results folder; PackError when its pack cannot be read."""
    design_path = folder / "experiment.json"
    design: dict[str, Any] = {}
    digest = None
    if design_path.is_file():
        raw = json.loads(design_path.read_text())
        design = raw.get("experiment", raw)
        digest = raw.get("digest")
    # The same records load_runs read and reported on: migrated, first of each run id, holding the
    # fields this report reads (rig.store.columns.REPORT_COLUMNS).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DuplicateRunWarning)
        table = runs_cache.report_table(ResultsStore(folder))
    if isinstance(design.get("source"), dict):
        return Source(folder, design, digest, table, None)
    # A design without `pack` (or none at all) ran on the built-in pack, as Experiment's default says.
    # The pack is read for its gate (the stage order and the success definition), so it must exist.
    try:
        pack = load_pack(design.get("pack"))
    except PackError as exc:
        raise PackError(
            f"{design_path} names pack {design.get('pack')!r}, which cannot be read: {exc}"
        ) from None
    return Source(folder, design, digest, table, pack)


def gate_text(pack: Pack) -> str:
    """The gate as the pack's docs tell a person to run it."""
    return code(" ".join(pack.spec.gate.command))


def success_text(sources: list[Source]) -> str:
    """What success means in these results: the gate and hidden tests of rig's own runs, and the
    verdict of the tool that measured imported ones."""
    gates = [gate_text(s.pack) for s in sources if s.pack is not None]
    kinds = [str(s.imported.get("kind")) for s in sources if s.imported is not None]
    parts = []
    if gates:
        parts.append(
            f"Success means the gate ({' / '.join(dict.fromkeys(gates))}) exits 0 and the hidden tests "
            "pass; nothing is judged by a model."
        )
    if kinds:
        parts.append(
            f"Imported results ({', '.join(code(k) for k in dict.fromkeys(kinds))}, `rig import`) keep the "
            "verdict of the tool that measured them: rig ran no gate on them and re-judged nothing "
            "(docs/importing.md)."
        )
    return " ".join(parts)
