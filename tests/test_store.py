"""The results store: appends from many writers, torn lines, attempt directories, atomic rewrite."""

import itertools
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rig.store.results import ResultsStore, StoreError

REPO_ROOT = Path(__file__).resolve().parents[1]

# Each writer waits for a shared "go" file so all four really append at the same time, and pads
# some records past 8 KiB: writes above PIPE_BUF carry no atomicity guarantee of their own.
WRITER = """
import sys, time
from pathlib import Path
from rig.store.results import ResultsStore

root, writer, count = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
store = ResultsStore(root)
(root.parent / f"ready-{writer}").touch()
while not (root.parent / "go").exists():
    time.sleep(0.001)
for i in range(count):
    size = (i * 7919 + writer * 104729) % 20000 if i % 3 == 0 else i % 50
    store.append_run({"writer": writer, "i": i, "pad": "x" * size, "text": "h\\u00e9llo \\u2028 w\\u00f6rld"})
"""


def lines_of(path: Path) -> list[bytes]:
    data = path.read_bytes()
    assert data.endswith(b"\n")
    return data[:-1].split(b"\n")


def test_append_read_round_trip(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "exp")
    assert not store.root.exists(), "the store must not create its root until the first write"
    assert store.read_runs() == []
    assert store.read_quarantine() == []
    records = [{"b": 1, "a": [1, 2, {"z": None}]}, {"name": "café ☕ 日本", "sep": "a\u2028b\nc"}]
    for record in records:
        store.append_run(record)
    assert store.read_runs() == records
    raw = lines_of(store.runs_path)
    assert len(raw) == 2
    assert raw[0] == b'{"a": [1, 2, {"z": null}], "b": 1}'
    # ensure_ascii=False: the text is stored as UTF-8, not as \\u escapes.
    assert "café ☕ 日本".encode() in raw[1]


def test_append_refuses_non_serializable(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    with pytest.raises(StoreError, match="runs.jsonl"):
        store.append_run({"when": object()})
    with pytest.raises(StoreError, match="must be a dict"):
        store.append_run([1, 2])  # type: ignore[arg-type]
    assert store.read_runs() == []


def test_concurrent_processes_never_interleave(tmp_path: Path) -> None:
    root = tmp_path / "exp"
    writers, count = 4, 200
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(root), str(w), str(count)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for w in range(writers)
    ]
    try:
        deadline = time.monotonic() + 30
        while not all((tmp_path / f"ready-{w}").exists() for w in range(writers)):
            assert time.monotonic() < deadline, "writers did not start"
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
            time.sleep(0.005)
        (tmp_path / "go").touch()
        for p in procs:
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0, err.decode()
    finally:
        for p in procs:
            p.kill()
            p.wait()

    raw = lines_of(root / "runs.jsonl")
    assert len(raw) == writers * count
    parsed = [json.loads(line) for line in raw]
    assert max(len(line) for line in raw) > 8192
    keys = {(r["writer"], r["i"]) for r in parsed}
    assert keys == {(w, i) for w in range(writers) for i in range(count)}
    assert ResultsStore(root).read_runs() == parsed
    # Each writer's own records keep their order.
    for w in range(writers):
        assert [r["i"] for r in parsed if r["writer"] == w] == list(range(count))
    # The writers really overlapped; otherwise this test would prove nothing about locking.
    switches = sum(a["writer"] != b["writer"] for a, b in itertools.pairwise(parsed))
    assert switches > 0


def test_concurrent_threads_never_interleave(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "exp")

    def write(t: int) -> None:
        for i in range(50):
            store.append_run({"t": t, "i": i, "pad": "y" * (9000 if i % 5 == 0 else i)})

    threads = [threading.Thread(target=write, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    records = store.read_runs()
    assert len(records) == 400
    assert {(r["t"], r["i"]) for r in records} == {(t, i) for t in range(8) for i in range(50)}


def test_torn_last_line_is_skipped_then_repaired(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    store.append_run({"i": 1})
    store.append_run({"i": 2})
    torn = b'{"i": 3, "pad": "interrupted mid-wri'
    with open(store.runs_path, "ab") as f:
        f.write(torn)
    assert store.read_runs() == [{"i": 1}, {"i": 2}]

    store.append_run({"i": 4})
    assert [json.loads(line) for line in lines_of(store.runs_path)] == [{"i": 1}, {"i": 2}, {"i": 4}]
    saved = list((tmp_path / "torn").iterdir())
    assert len(saved) == 1 and saved[0].name.startswith("runs.jsonl.")
    assert saved[0].read_bytes() == torn


def test_repair_moves_torn_bytes_and_reports(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    assert store.repair() == []
    store.append_quarantine({"q": 1})
    with open(store.quarantine_path, "ab") as f:
        f.write(b'{"q": 2, "x": "\xc3')
    assert store.read_quarantine() == [{"q": 1}]

    messages = store.repair()
    assert len(messages) == 1
    assert "quarantine.jsonl" in messages[0] and "torn" in messages[0]
    assert store.quarantine_path.read_bytes() == b'{"q": 1}\n'
    (saved,) = (tmp_path / "torn").iterdir()
    assert saved.read_bytes() == b'{"q": 2, "x": "\xc3'
    assert store.repair() == []


def test_invalid_complete_last_line_is_skipped_and_repaired(tmp_path: Path) -> None:
    # A crash can also leave a newline-terminated fragment; readers skip it, and the next append
    # must move it away or it would become an unreadable middle line.
    store = ResultsStore(tmp_path)
    store.append_run({"i": 1})
    with open(store.runs_path, "ab") as f:
        f.write(b'{"i": 2, \n')
    assert store.read_runs() == [{"i": 1}]
    store.append_run({"i": 3})
    assert store.read_runs() == [{"i": 1}, {"i": 3}]
    assert (tmp_path / "torn").is_dir()


def test_invalid_middle_line_names_file_and_line(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    store.runs_path.write_text('{"i": 1}\n{"i": 2}\nnot json at all\n{"i": 4}\n')
    with pytest.raises(StoreError) as info:
        store.read_runs()
    message = str(info.value)
    assert str(store.runs_path) in message and "line 3" in message
    assert "\n" not in message

    store.runs_path.write_text('{"i": 1}\n[1, 2]\n{"i": 3}\n')
    with pytest.raises(StoreError, match="line 2"):
        store.read_runs()


def test_new_attempt_dir_numbers(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "exp")
    for expected in (1, 2, 3):
        n, path = store.new_attempt_dir("t1.pi-agents_md.0")
        assert n == expected
        assert path == tmp_path / "exp" / "runs" / "t1.pi-agents_md.0" / f"attempt-{expected}"
        assert path.is_dir()

    # A directory left by a killed attempt counts even though no record mentions it.
    (store.root / "runs" / "r2" / "attempt-5").mkdir(parents=True)
    (store.root / "runs" / "r2" / "attempt-notes").mkdir()
    assert store.new_attempt_dir("r2") == (6, store.root / "runs" / "r2" / "attempt-6")


def test_new_attempt_dir_is_exclusive_across_threads(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    results: list[tuple[int, Path]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def grab() -> None:
        barrier.wait()
        for _ in range(10):
            got = store.new_attempt_dir("run")
            with lock:
                results.append(got)

    threads = [threading.Thread(target=grab) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({path for _, path in results}) == 80
    assert sorted(n for n, _ in results) == list(range(1, 81))


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b", "../x", "a b", "run\n", "é"])
def test_new_attempt_dir_rejects_bad_run_id(tmp_path: Path, bad: str) -> None:
    with pytest.raises(StoreError, match="run id"):
        ResultsStore(tmp_path).new_attempt_dir(bad)


def test_rewrite_runs_replaces_atomically(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    for i in range(5):
        store.append_run({"i": i, "status": "failure"})
    store.append_quarantine({"i": 99})
    new = [{"i": 0, "status": "infra"}, {"i": 3, "status": "success", "note": "ünïcode"}]
    store.rewrite_runs(new)
    assert store.read_runs() == new
    assert store.read_quarantine() == [{"i": 99}]
    assert store.runs_path.read_bytes() == b"".join(
        (json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n").encode() for r in new
    )
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []
    store.append_run({"i": 7})
    assert store.read_runs() == [*new, {"i": 7}]


def test_quarantine_and_runs_are_separate(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    store.append_quarantine({"kind": "infra"})
    assert not store.runs_path.exists()
    store.append_run({"kind": "run"})
    before = store.quarantine_path.read_bytes()
    store.append_run({"kind": "run2"})
    store.rewrite_runs([{"kind": "rewritten"}])
    assert store.quarantine_path.read_bytes() == before
    assert store.read_quarantine() == [{"kind": "infra"}]
    assert store.read_runs() == [{"kind": "rewritten"}]


# An append that hits a file size limit part way, like a full disk: the write is cut short, then fails.
SHORT_WRITE = """
import json, resource, sys
from rig.store.results import ResultsStore, StoreError

store = ResultsStore(sys.argv[1])
limit = store.runs_path.stat().st_size + 100
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
try:
    store.append_run({"i": 9, "pad": "z" * 5000})
except StoreError as exc:
    print(json.dumps({"error": str(exc), "size": store.runs_path.stat().st_size}))
"""


def test_append_cut_short_is_cut_back_and_reported(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    store.append_run({"i": 1})
    before = store.runs_path.read_bytes()
    proc = subprocess.run(
        [sys.executable, "-c", SHORT_WRITE, str(tmp_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    message = out["error"]
    assert message.startswith(f"{store.runs_path}: appending a record failed (File too large)")
    assert "the 100 bytes written were cut back" in message and "\n" not in message
    assert out["size"] == len(before) and store.runs_path.read_bytes() == before
    store.append_run({"i": 2})
    assert store.read_runs() == [{"i": 1}, {"i": 2}]


def test_os_errors_are_one_line_store_errors(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    store.runs_path.mkdir()
    with pytest.raises(StoreError, match=r"runs\.jsonl: reading failed \(Is a directory\)"):
        store.read_runs()
    with pytest.raises(StoreError, match=r"runs\.jsonl: opening for an append failed \(Is a directory\)"):
        store.append_run({"i": 1})
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "r1").write_text("a file where a folder belongs")
    with pytest.raises(StoreError, match=r"runs/r1: creating the run's folder failed"):
        store.new_attempt_dir("r1")


def test_readers_migrate_in_memory_and_never_write(tmp_path: Path) -> None:
    """rig.store.migrate's readers: records come up to the current schema; the files stay as they were."""
    from rig.schema import RECORD_SCHEMA_VERSION
    from rig.store.migrate import read_quarantine, read_runs

    root = tmp_path / "exp"
    root.mkdir()
    old = {"run_id": "t__a__r01", "attempt": 1, "timed_out": True, "infra": {"is_infra": False, "rule": None}}
    stalled = {**old, "timed_out": False, "infra": {"is_infra": True, "rule": "stalled", "detail": None}}
    (root / "runs.jsonl").write_text(json.dumps(old) + "\n")
    # Every quarantined attempt counts, even of one run id: no duplicate dropping there.
    (root / "quarantine.jsonl").write_text(
        json.dumps(stalled) + "\n" + json.dumps({**stalled, "attempt": 2}) + "\n"
    )
    before = {p.name: p.read_bytes() for p in root.iterdir()}
    store = ResultsStore(root)
    (run,) = read_runs(store)
    assert run["record_schema"] == RECORD_SCHEMA_VERSION and run["hang"] == "timeout"
    quarantine = read_quarantine(store)
    assert [r["infra"]["rule"] for r in quarantine] == ["stalled_provider", "stalled_provider"]
    assert [r["hang"] for r in quarantine] == [None, None]
    assert {p.name: p.read_bytes() for p in root.iterdir()} == before, "a reader wrote (or took the lock)"
