"""The columnar cache of runs.jsonl (rig.store.runs_cache): brought up to date from the last indexed byte,
rebuilt when the file was rewritten, never a different answer from parsing the file itself.

Every test works on a copy of the committed small set with RIG_RUNS_CACHE=on (it is 100 KB, below
the size at which `auto` starts a cache), and checks what the cache recorded in its manifest.
"""

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest

from rig.analysis import DuplicateRunWarning, infra_summary, load_runs
from rig.store import runs_cache
from rig.store.migrate import read_runs
from rig.store.results import ResultsStore

DATA = Path(__file__).parent / "data"
SMALL = DATA / "results_small" / "results_small"
CONFIG = DATA / "results_small.toml"
RIG = str(Path(sys.executable).with_name("rig"))


@pytest.fixture(autouse=True)
def cache_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(runs_cache.ENV, "on")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    dest = tmp_path / "results" / "results_small"
    shutil.copytree(SMALL, dest)
    return dest


def _manifest(folder: Path, kind: str = "runs") -> dict[str, Any]:
    return json.loads((folder / runs_cache.CACHE_DIR / f"{kind}.json").read_text())


def _run_ids(folder: Path) -> list[str]:
    return runs_cache.scored(ResultsStore(folder), ["run_id"]).column("run_id").to_pylist()


def _new_record(folder: Path, n: int) -> dict[str, Any]:
    record = json.loads((folder / "runs.jsonl").read_text().splitlines()[n % 30])
    record["run_id"] = f"{record['run_id']}__extra{n}"
    return record


def _without_cache(fn: Any, *args: Any) -> Any:
    previous = os.environ[runs_cache.ENV]
    os.environ[runs_cache.ENV] = "off"
    try:
        return fn(*args)
    finally:
        os.environ[runs_cache.ENV] = previous


def test_appends_are_parsed_alone_into_a_new_part(folder: Path) -> None:
    store = ResultsStore(folder)
    assert len(_run_ids(folder)) == 30
    first = _manifest(folder)
    size = (folder / "runs.jsonl").stat().st_size
    assert (first["offset"], first["lines"], first["records"]) == (size, 30, 30)
    store.append_run(_new_record(folder, 1))
    store.append_run(_new_record(folder, 2))
    assert _run_ids(folder)[-2:] == [_new_record(folder, 1)["run_id"], _new_record(folder, 2)["run_id"]]
    second = _manifest(folder)
    assert second["offset"] == (folder / "runs.jsonl").stat().st_size and second["records"] == 32
    # The first part is kept as it was; the new one holds the two appended records only.
    assert second["parts"][0] == first["parts"][0] and len(second["parts"]) == 2
    assert pq.read_table(folder / runs_cache.CACHE_DIR / second["parts"][1]).num_rows == 2
    # Nothing new: nothing is written.
    before = (folder / runs_cache.CACHE_DIR / "runs.json").stat().st_mtime_ns
    assert len(_run_ids(folder)) == 32
    assert (folder / runs_cache.CACHE_DIR / "runs.json").stat().st_mtime_ns == before


def test_many_appends_are_merged_into_one_part(folder: Path) -> None:
    store = ResultsStore(folder)
    for n in range(runs_cache.MAX_PARTS + 1):
        store.append_run(_new_record(folder, n))
        assert len(_run_ids(folder)) == 31 + n
    manifest = _manifest(folder)
    assert len(manifest["parts"]) < runs_cache.MAX_PARTS
    parts = sorted(p.name for p in (folder / runs_cache.CACHE_DIR).glob("runs-*.parquet"))
    assert parts == sorted(manifest["parts"]), "a merged part was left behind"
    assert _run_ids(folder) == _without_cache(_run_ids, folder)


def test_a_torn_last_line_waits_until_it_is_complete(folder: Path) -> None:
    runs = folder / "runs.jsonl"
    size = runs.stat().st_size
    line = (json.dumps(_new_record(folder, 1), sort_keys=True) + "\n").encode()
    with runs.open("ab") as f:
        f.write(line[:100])
    assert len(_run_ids(folder)) == 30
    assert _manifest(folder)["offset"] == size
    with runs.open("ab") as f:
        f.write(line[100:])
    assert _run_ids(folder)[-1] == _new_record(folder, 1)["run_id"]
    assert _manifest(folder)["offset"] == runs.stat().st_size


def test_an_invalid_last_line_is_skipped_then_repaired_by_the_next_append(folder: Path) -> None:
    runs = folder / "runs.jsonl"
    size = runs.stat().st_size
    with runs.open("ab") as f:
        f.write(b'{"run_id": "cut short"\n')
    assert len(_run_ids(folder)) == 30 and _manifest(folder)["offset"] == size
    ResultsStore(folder).append_run(_new_record(folder, 1))  # moves the bad line to torn/
    assert len(_run_ids(folder)) == 31
    assert _manifest(folder)["parts"][0] in [p.name for p in (folder / runs_cache.CACHE_DIR).iterdir()]


def test_a_rewritten_file_is_read_anew(folder: Path) -> None:
    store = ResultsStore(folder)
    records = read_runs(store)
    assert not load_runs(folder).set_index("run_id").loc[records[0]["run_id"], "success"]
    # rig reclassify --write: a new file in its place.
    store.rewrite_runs([{**records[0], "success": True}, *records[1:]])
    assert load_runs(folder).set_index("run_id").loc[records[0]["run_id"], "success"]
    # The same size, the same inode, another tail: the last run id edited in place.
    runs = folder / "runs.jsonl"
    data = runs.read_bytes()
    last = records[-1]["run_id"]
    edited = last[:-1] + ("9" if last[-1] != "9" else "8")
    at = data.rindex(f'"run_id": "{last}"'.encode())
    with runs.open("r+b") as f:
        f.seek(at)
        f.write(f'"run_id": "{edited}"'.encode())
    assert runs.stat().st_size == len(data)
    assert _run_ids(folder)[-1] == edited
    # Shorter than what was indexed: the last record cut off.
    with runs.open("r+b") as f:
        f.truncate(data.rindex(b"\n", 0, len(data) - 1) + 1)
    assert len(_run_ids(folder)) == 29
    assert _manifest(folder)["records"] == 29


def test_a_damaged_cache_is_rebuilt(folder: Path) -> None:
    expected = _without_cache(load_runs, folder)
    load_runs(folder)
    cache = folder / runs_cache.CACHE_DIR
    (cache / _manifest(folder)["parts"][0]).write_bytes(b"not parquet")
    pd.testing.assert_frame_equal(load_runs(folder), expected)
    (cache / "runs.json").write_text("{")
    pd.testing.assert_frame_equal(load_runs(folder), expected)
    assert _manifest(folder)["records"] == 30


def test_deleting_the_cache_changes_nothing(folder: Path) -> None:
    without = _without_cache(load_runs, folder)
    assert not (folder / runs_cache.CACHE_DIR).exists(), "RIG_RUNS_CACHE=off wrote a cache"
    built = load_runs(folder)
    warm = load_runs(folder)
    shutil.rmtree(folder / runs_cache.CACHE_DIR)
    rebuilt = load_runs(folder)
    for frame in (built, warm, rebuilt):
        pd.testing.assert_frame_equal(frame, without)
    pd.testing.assert_frame_equal(infra_summary(folder), _without_cache(infra_summary, folder))


def test_load_runs_through_the_cache_holds_the_records(folder: Path) -> None:
    records = {r["run_id"]: r for r in read_runs(ResultsStore(folder))}
    df = load_runs(folder)
    assert (folder / runs_cache.CACHE_DIR / "runs.json").is_file()
    assert set(df["run_id"]) == set(records) and len(df) == 30
    for row in df.itertuples():
        record = records[row.run_id]
        assert (row.task, row.condition, row.repetition, row.success) == (
            record["task"],
            record["condition"],
            record["repetition"],
            record["success"],
        )
        assert row.cost_usd == record["metrics"]["cost_usd"]
        assert row.total_tokens == record["metrics"]["total_tokens"]
        assert row.fixture_hash == record["pins"]["fixture_hash"]
        assert row.artifacts == (folder / record["artifacts"]).resolve()
    # What `rig report` reads of each record is the record's own.
    table = runs_cache.report_table(ResultsStore(folder))
    by_run = {r["run_id"]: r for r in table.to_pylist()}
    assert sorted(by_run) == sorted(records)
    for run_id, row in by_run.items():
        record = records[run_id]
        assert json.loads(row["pins"]) == record["pins"] and row["artifacts"] == record["artifacts"]
        assert row["reported_model"] == record["metrics"]["model"]
    # What failures.md reads of each failed run, keyed by its attempt folder as load_runs names it.
    details = runs_cache.failure_details(folder, table)
    failed = [r for r in records.values() if not r["success"]]
    assert failed and len(details) == len(failed)
    for record in failed:
        detail = details[str((folder / record["artifacts"]).resolve())]
        assert detail["condition"] == record["condition"]
        assert detail["hidden"]["failed"] == record["hidden"]["failed"]
        assert detail["check"]["failed"] == record["check"]["failed"]


def test_duplicates_are_reported_as_without_the_cache(folder: Path) -> None:
    load_runs(folder)
    first = read_runs(ResultsStore(folder))[0]
    ResultsStore(folder).append_run({**first, "success": True})
    with pytest.warns(DuplicateRunWarning) as cached:
        df = load_runs(folder)
    with warnings.catch_warnings(record=True) as plain:
        warnings.simplefilter("always", DuplicateRunWarning)
        read_runs(ResultsStore(folder))
    assert [str(w.message) for w in cached] == [str(w.message) for w in plain]
    assert len(df) == 30 and not df.set_index("run_id").loc[first["run_id"], "success"]


def test_a_folder_it_cannot_write_is_read_all_the_same(folder: Path) -> None:
    expected = _without_cache(load_runs, folder)
    # No cache, and none can be made (runs.cache is taken by a file): everything in memory.
    (folder / runs_cache.CACHE_DIR).write_text("")
    pd.testing.assert_frame_equal(load_runs(folder), expected)
    (folder / runs_cache.CACHE_DIR).unlink()
    # A cache that cannot be updated (its lock cannot be taken): its parts plus the rest in memory.
    load_runs(folder)
    manifest = _manifest(folder)
    lock = folder / runs_cache.CACHE_DIR / ".lock"
    lock.unlink()
    lock.mkdir()
    record = _new_record(folder, 1)
    ResultsStore(folder).append_run(record)
    assert _run_ids(folder)[-1] == record["run_id"]
    assert _manifest(folder) == manifest


def test_cli_status_and_report_say_the_same_with_and_without_the_cache(tmp_path: Path, folder: Path) -> None:
    def rig(mode: str, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "RIG_RESULTS_ROOT": str(folder.parent), runs_cache.ENV: mode}
        return subprocess.run([RIG, *args], capture_output=True, text=True, timeout=300, env=env)

    outputs = {}
    for mode in ("off", "on", "on"):
        status = rig(mode, "status", str(CONFIG))
        assert status.returncode == 0, status.stderr
        outputs.setdefault(mode, []).append(status.stdout)
    assert outputs["off"][0] == outputs["on"][0] == outputs["on"][1]
    reports = {}
    for mode in ("off", "on"):
        out = folder / f"report-{mode}"
        proc = rig(mode, "report", str(CONFIG), "--out", str(out))
        assert proc.returncode == 0, proc.stderr
        reports[mode] = [(out / name).read_text() for name in ("report.md", "failures.md")]
    assert reports["off"] == reports["on"]
    assert _manifest(folder)["records"] == 30
    assert rig("sometimes", "status", str(CONFIG)).stderr.startswith("error: RIG_RUNS_CACHE='sometimes'")
