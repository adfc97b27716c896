"""The column table (rig.store.columns) is the one declaration of a reported field: the cache's schema,
its Parquet parts, load_runs' frame and what `rig report` reads all come from it, and a column added
to the table reaches all of them, rebuilding a cache written before it.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import rig
from rig.analysis import COLUMNS, load_runs
from rig.store import runs_cache
from rig.store.columns import QUARANTINE_COLUMNS, RUN_COLUMNS
from rig.store.results import ResultsStore

SMALL = Path(__file__).parent / "data" / "results_small" / "results_small"


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(runs_cache.ENV, "on")
    dest = tmp_path / "results" / "results_small"
    shutil.copytree(SMALL, dest)
    return dest


def _manifest(folder: Path) -> dict[str, Any]:
    return json.loads((folder / runs_cache.CACHE_DIR / "runs.json").read_text())


def test_every_reader_takes_its_columns_from_the_table(folder: Path) -> None:
    store = ResultsStore(folder)
    table = runs_cache.scored(store)
    assert [(f.name, f.type) for f in table.schema] == [(c.name, c.arrow_type()) for c in RUN_COLUMNS]
    part = pq.read_table(folder / runs_cache.CACHE_DIR / _manifest(folder)["parts"][0])
    assert part.schema.equals(table.schema)
    assert runs_cache.quarantined(store).schema.names == [c.name for c in QUARANTINE_COLUMNS]
    frame = [c.name for c in RUN_COLUMNS if c.frame]
    assert list(COLUMNS) == frame and list(load_runs(folder).columns) == frame
    assert runs_cache.report_table(store).column_names == [c.name for c in RUN_COLUMNS if c.report]


def test_a_column_added_to_the_table_reaches_every_reader(folder: Path, tmp_path: Path) -> None:
    """A copy of the rig with one more Column (the record's assistant messages), run on a results
    folder whose cache this rig wrote: the cache is rebuilt, and the column is in its schema, in
    load_runs' frame and in what `rig report` reads, holding each record's value."""
    runs_cache.scored(ResultsStore(folder))
    before = _manifest(folder)
    copy = tmp_path / "copy"
    shutil.copytree(Path(rig.__file__).parent, copy / "rig", ignore=shutil.ignore_patterns("__pycache__"))
    columns = copy / "rig" / "store" / "columns.py"
    text = columns.read_text()
    end = text.index("\n)\n", text.index("RUN_COLUMNS: tuple[Column, ...] = ("))
    added = '\n    Column("assistant_messages", "int", _count("assistant_messages"), report=True),'
    columns.write_text(text[:end] + added + text[end:])
    script = (
        "import json, sys\n"
        "from rig.analysis import load_runs\n"
        "from rig.store import runs_cache\n"
        "from rig.store.results import ResultsStore\n"
        "store = ResultsStore(sys.argv[1])\n"
        "table = runs_cache.scored(store)\n"
        "frame = load_runs(sys.argv[1])\n"
        "print(json.dumps({\n"
        "    'rig': runs_cache.__file__,\n"
        "    'schema': table.schema.names,\n"
        "    'frame': list(frame.columns),\n"
        "    'report': runs_cache.report_table(store).column_names,\n"
        "    'values': dict(zip(frame['run_id'], frame['assistant_messages'].tolist())),\n"
        "}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(copy), runs_cache.ENV: "on"}
    done = subprocess.run(
        [sys.executable, "-c", script, str(folder)], cwd=copy, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["rig"].startswith(str(copy))
    for names in (seen["schema"], seen["frame"], seen["report"]):
        assert "assistant_messages" in names
    assert seen["schema"][-1] == "assistant_messages"
    records = [json.loads(line) for line in (folder / "runs.jsonl").read_text().splitlines()]
    assert seen["values"] == {r["run_id"]: r["metrics"]["assistant_messages"] for r in records}
    after = _manifest(folder)
    assert after["code"] != before["code"], "a changed column table kept the old cache"
    assert pq.read_schema(folder / runs_cache.CACHE_DIR / after["parts"][0]).names == seen["schema"]
