"""`rig report` on a copy of the committed small results set, through the CLI and build_report.

Every test works on copies under tmp_path: the committed set (tests/data/results_small/) is never
written to. Reports are built once per module and shared, which keeps the module fast.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from builtin_pack import BUILTIN

from rig.analysis import PoolingError
from rig.packs.manifest import load_pack
from rig.report.report import build_report, stage_order
from rig.store.migrate import migrate

DATA = Path(__file__).parent / "data"
SMALL = DATA / "results_small" / "results_small"
CONFIG = DATA / "results_small.toml"
RIG = str(Path(sys.executable).with_name("rig"))
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
FIGURES = ("success_by_task.png", "cost_distribution.png", "effects_forest.png")
RUN_LINE = re.compile(
    r"^- (?:`(?P<exp>[^`]+)` · )?`(?P<task>[^`]+)` · `(?P<cond>[^`]+)` · "
    r"rep (?P<rep>\d+) · attempt (?P<att>\d+)"
)


def _records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "runs.jsonl").read_text().splitlines() if line.strip()]


def _copy_set(root: Path, name: str = "results_small") -> Path:
    """Copy the committed set to root/<name>; under another name, rewrite the experiment name."""
    dest = root / name
    shutil.copytree(SMALL, dest)
    if name != "results_small":
        lines = []
        for record in _records(dest):
            record["experiment"] = name
            lines.append(json.dumps(record, sort_keys=True))
            (dest / record["artifacts"] / "record.json").write_text(
                json.dumps(record, indent=2, sort_keys=True)
            )
        (dest / "runs.jsonl").write_text("\n".join(lines) + "\n")
        design = json.loads((dest / "experiment.json").read_text())
        design["experiment"]["name"] = name
        (dest / "experiment.json").write_text(json.dumps(design, indent=2, sort_keys=True))
    return dest


def _rig(*args: str, root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RIG_RESULTS_ROOT": str(root)}
    return subprocess.run([RIG, "report", *args], capture_output=True, text=True, timeout=120, env=env)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results root holding a copy of the small set and a renamed second copy, plus its config."""
    base = tmp_path_factory.mktemp("results")
    _copy_set(base)
    _copy_set(base, "results_small_b")
    # The experiment name defaults to the config file's stem.
    shutil.copy(CONFIG, base / "results_small_b.toml")
    return base


@pytest.fixture(scope="module")
def cli_md(root: Path) -> Path:
    out = root / "out_cli"
    proc = _rig(str(CONFIG), "--out", str(out), root=root)
    assert proc.returncode == 0, proc.stderr
    written = [Path(line) for line in proc.stdout.splitlines()]
    assert out / "report.md" in written and out / "failures.md" in written
    return out


@pytest.fixture(scope="module")
def direct_md(root: Path) -> tuple[Path, list[Path]]:
    out = root / "out_direct"
    written = build_report([root / "results_small"], out, seed=3)
    return out, written


def _table_rows(text: str, header_start: str) -> list[list[str]]:
    """The body rows of the first Markdown table whose header starts with `header_start`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


def _check_report_md(out: Path) -> None:
    text = (out / "report.md").read_text()
    # 1. design and pins
    assert "Experiment `results_small`" in text
    assert "Small scripted A/B for analysis tests" in text
    assert "repetitions: 3, seed: 11" in text
    assert "`AGENTS.md`" in text  # the overlay of no_agents_md
    assert "scripted-0.1.0" in text and "`9.2.0`" in text and "`0.17.6`" in text
    record = _records(SMALL)[0]
    assert record["pins"]["fixture_hash"][:12] in text
    assert record["pins"]["task_hash"][:12] in text
    # The design names no pack: the built-in one, whose gate defines success; the records predate packs.
    gate = " ".join(BUILTIN.spec.gate.command)
    assert f"pack: `{BUILTIN.name}` (built-in), gate: `{gate}`, stages: `ruff`, `pytest`," in text
    assert f"Success means the gate (`{gate}`) exits 0 and the hidden tests pass" in text
    # These records predate the sandbox verdict: none is said to be unsealed (tests/test_unsealed.py).
    assert "Not sealed" not in text
    pins = dict(row[:2] for row in _table_rows(text, "| pin | value |"))
    assert pins["pack"] == pins["pack hash"] == "(before packs)"
    # 2. per-cell table: 5 tasks x 2 conditions + an ALL row per condition
    cells = _table_rows(text, "| task | condition | n |")
    assert len(cells) == 12
    keys = {(row[0], row[1]) for row in cells}
    for task in {r["task"] for r in _records(SMALL)}:
        assert (f"`{task}`", "`agents_md`") in keys and (f"`{task}`", "`no_agents_md`") in keys
    all_rows = [row for row in cells if row[0] == "**ALL**"]
    assert {row[1] for row in all_rows} == {"`agents_md`", "`no_agents_md`"}
    successes = {c: sum(r["success"] for r in _records(SMALL) if r["condition"] == c) for c in ("agents_md",)}
    agents_all = next(row for row in all_rows if row[1] == "`agents_md`")
    assert agents_all[2] == "15" and agents_all[3] == str(successes["agents_md"])
    assert re.fullmatch(r"\[\d+\.\d%, \d+\.\d%\]", agents_all[5])
    assert agents_all[6].startswith("$")
    assert "**Infrastructure:** 0 infra reruns in total" in text and "0 runs still quarantined" in text
    assert "none in any of the 10 cells" in text
    # 3. comparisons: success with effect, CI, raw p and Holm p; never a bare p
    comparisons = _table_rows(text, "| metric | B vs A |")
    success = next(row for row in comparisons if row[0] == "success rate")
    assert success[1] == "`no_agents_md` vs `agents_md`"
    assert re.fullmatch(r"[+-]\d+\.\d pp", success[2])
    assert re.fullmatch(r"\[[+-]\d+\.\d, [+-]\d+\.\d\] pp", success[3])
    assert re.fullmatch(r"[0-9.e-]+", success[5]) and re.fullmatch(r"[0-9.e-]+", success[6])
    assert float(success[6]) >= float(success[5])
    for row in comparisons:
        assert row[2] != "—" or row[5] == "—", "a p-value without its effect"
    ratio = next(row for row in comparisons if row[0] == "cost (USD)")
    assert ratio[2].endswith("×") and ratio[3].startswith("[")
    assert "Per-task success" in text and "Fisher p (raw)" in text
    fisher = _table_rows(text, "| task | A agents_md |")
    assert len(fisher) == 5
    # 4. behaviour table, one row per condition
    behaviour = _table_rows(text, "| condition | runs | ran the gate |")
    assert [row[0] for row in behaviour] == ["`agents_md`", "`no_agents_md`"]
    assert all(row[1] == "15" for row in behaviour)
    # 5. figures are linked and exist
    for name in FIGURES:
        assert f"(figures/{name})" in text


def _check_failures(out: Path, folders: list[Path]) -> None:
    text = (out / "failures.md").read_text()
    expected = {
        (r["experiment"], r["task"], r["condition"], r["repetition"], r["attempt"]): r["failing_stage"]
        for folder in folders
        for r in _records(folder)
        if not r["success"]
    }
    listed: dict[tuple, str] = {}
    stage = None
    default_exp = _records(folders[0])[0]["experiment"]
    for line in text.splitlines():
        if line.startswith("## Stage "):
            stage = re.match(r"## Stage `([^`]+)`", line).group(1)  # type: ignore[union-attr]
            continue
        match = RUN_LINE.match(line)
        if not match:
            continue
        key = (
            match["exp"] or default_exp,
            match["task"],
            match["cond"],
            int(match["rep"]),
            int(match["att"]),
        )
        assert key not in listed, f"run listed twice: {key}"
        listed[key] = stage  # type: ignore[assignment]
        links = re.findall(r"\]\(([^)]+)\)", line)
        assert "record.json" in " ".join(links) and "diff.patch" in " ".join(links)
        for link in links:
            assert not link.startswith("/"), link
            assert (out / link).is_file(), f"broken link {link}"
    assert listed == expected
    assert f"{len(expected)} of " in text


def _failing_stages(out: Path) -> list[str]:
    """The stage column of failures.md's summary table, in its order."""
    return [row[0].strip("`") for row in _table_rows((out / "failures.md").read_text(), "| failing stage |")]


def test_cli_report_md(cli_md: Path) -> None:
    _check_report_md(cli_md)
    _check_failures(cli_md, [SMALL])
    # The built-in gate's order (ruff before pytest), then the hidden tests: not alphabetical.
    assert _failing_stages(cli_md) == ["ruff", "pytest", "hidden"]


def test_build_report_md(direct_md: tuple[Path, list[Path]]) -> None:
    out, written = direct_md
    assert [p.name for p in written] == ["report.md", "failures.md", *FIGURES]
    assert all(p.is_file() for p in written)
    _check_report_md(out)
    _check_failures(out, [SMALL])
    # The committed set stays untouched.
    assert not (SMALL / "report.md").exists() and not (SMALL / "figures").exists()


def test_figures_are_valid_pngs(direct_md: tuple[Path, list[Path]]) -> None:
    from matplotlib.image import imread

    out, _ = direct_md
    for name in FIGURES:
        path = out / "figures" / name
        assert path.read_bytes()[:8] == PNG_MAGIC
        image = imread(path)
        assert image.shape[0] > 300 and image.shape[1] > 500


def test_report_is_deterministic(root: Path, direct_md: tuple[Path, list[Path]]) -> None:
    first, _ = direct_md
    again = root / "out_again"
    build_report([root / "results_small"], again, seed=3)
    for name in ("report.md", "failures.md", *(f"figures/{f}" for f in FIGURES)):
        assert (again / name).read_bytes() == (first / name).read_bytes(), name


def test_figures_drawn_by_a_dead_worker_are_drawn_here_the_same(tmp_path: Path) -> None:
    """The worker that draws the figures is only a speed-up: the same bytes whether it draws a
    figure, or is killed and the figure is drawn in this process."""
    import multiprocessing
    import signal

    from rig.report import figures
    from rig.report.background import Worker

    values = {"a": [0.01, 0.02, 0.03], "b": [0.02, 0.05]}
    arms = ["a", "b"]
    with Worker(figures.warm_up) as worker:
        in_worker = worker.run(figures.cost_distribution, values, arms, tmp_path / "w.png", cost=True)()
        children = multiprocessing.active_children()
        assert children, "no worker process was started"
        for child in children:
            os.kill(child.pid, signal.SIGKILL)
            child.join()
        here = worker.run(figures.cost_distribution, values, arms, tmp_path / "h.png", cost=True)()
    assert in_worker.read_bytes() == here.read_bytes()
    assert in_worker.read_bytes()[:8] == PNG_MAGIC


def test_cli_html_is_self_contained(root: Path) -> None:
    out = root / "out_html"
    proc = _rig(str(CONFIG), "--out", str(out), "--format", "html", root=root)
    assert proc.returncode == 0, proc.stderr
    assert not (out / "report.md").exists()
    page = (out / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert page.count('src="data:image/png;base64,') == 3
    assert not re.search(r"""(src|href)\s*=\s*["']?https?://""", page)
    assert "<link" not in page and "<script" not in page
    assert "Experiment <code>results_small</code>" in page
    assert "<strong>ALL</strong>" in page and "p (Holm)" in page and "ran the gate" in page
    _check_failures(out, [SMALL])


def test_cli_vs_compares_experiments(root: Path) -> None:
    out = root / "out_vs"
    proc = _rig(str(CONFIG), "--vs", str(root / "results_small_b.toml"), "--out", str(out), root=root)
    assert proc.returncode == 0, proc.stderr
    text = (out / "report.md").read_text()
    assert "Experiment `results_small`" in text and "Experiment `results_small_b`" in text
    comparisons = _table_rows(text, "| metric | B vs A |")
    success = next(row for row in comparisons if row[0] == "success rate")
    assert "results_small_b" in success[1] and "results_small`" in success[1]
    # Identical copies: no difference in success, with a CI around 0.
    assert success[2] == "+0.0 pp"
    _check_failures(out, [SMALL, root / "results_small_b"])


def test_mixed_pins_refused_unless_allowed(tmp_path: Path) -> None:
    folder = _copy_set(tmp_path)
    records = _records(folder)
    records[0]["harness_version"] = records[0]["pins"]["harness_version"] = "scripted-9.9.9"
    (folder / "runs.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))

    proc = _rig(str(CONFIG), "--out", str(tmp_path / "out"), root=tmp_path)
    assert proc.returncode == 2
    error = proc.stderr.strip()
    assert len(error.splitlines()) == 1 and error.startswith("error:")
    assert "--allow-mixed-pins" in error
    assert not (tmp_path / "out").exists()

    proc = _rig(str(CONFIG), "--out", str(tmp_path / "out"), "--allow-mixed-pins", root=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "out" / "report.md").read_text()
    assert "**mixed**" in text and "scripted-9.9.9" in text


def test_records_of_two_rig_versions_are_refused_unless_allowed(tmp_path: Path) -> None:
    folder = _copy_set(tmp_path)
    records = _records(folder)
    for record in records[:5]:
        record["pins"]["rig_version"] = "0.1.0+g0123456789ab"
        record["pins"]["toolchain_hash"] = "ab" * 32
    (folder / "runs.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    with pytest.raises(
        PoolingError, match=r"rig_version differs across the runs: '0.1.0\+g0123.*--allow-mixed"
    ):
        build_report([folder], tmp_path / "out")
    assert not (tmp_path / "out").exists()

    build_report([folder], tmp_path / "out", allow_mixed_pins=True)
    pins = dict(
        row[:2] for row in _table_rows((tmp_path / "out" / "report.md").read_text(), "| pin | value |")
    )
    assert pins["rig version"] == "**mixed**: `0.1.0` (25 runs), `0.1.0+g0123456789ab` (5 runs)"
    assert pins["toolchain hash"] == "**mixed**: `None` (25 runs), `abababababab` (5 runs)"


def test_infra_and_missing_costs(tmp_path: Path) -> None:
    """Quarantined attempts show per cell and in total; without costs the figure shows tokens."""
    folder = _copy_set(tmp_path)
    records = _records(folder)
    for record in records:
        record["metrics"]["cost_usd"] = None
    (folder / "runs.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    scored = next(r for r in records if r["run_id"] == "t2_add_endpoint__agents_md__r01")
    lost = {**scored, "run_id": "t2_add_endpoint__agents_md__r04", "repetition": 4}
    infra = {"is_infra": True, "rule": "no_model_turn", "detail": "no assistant turn"}
    rerun = {**scored, "attempt": 1, "infra": infra}
    lines = [json.dumps({**r, "infra": infra}, sort_keys=True) for r in (rerun, lost, {**lost, "attempt": 2})]
    (folder / "quarantine.jsonl").write_text("\n".join(lines) + "\n")

    out = tmp_path / "out"
    build_report([folder], out)
    text = (out / "report.md").read_text()
    assert "**Infrastructure:** 3 infra reruns in total" in text and "1 run still quarantined" in text
    assert "`t2_add_endpoint` / `agents_md`: 3 reruns, 1 quarantined" in text
    assert "Total tokens per run (no run reported a cost)" in text
    cells = _table_rows(text, "| task | condition | n |")
    assert all(row[6] == "—" for row in cells)  # no median cost
    cost = next(row for row in _table_rows(text, "| metric | B vs A |") if row[0] == "cost (USD)")
    assert cost[2:4] == ["—", "—"] and cost[5:7] == ["—", "—"] and "no cost reported" in cost[9]
    assert (out / "figures" / "cost_distribution.png").read_bytes()[:8] == PNG_MAGIC


def test_agent_hangs_are_counted_as_scored_failures(tmp_path: Path) -> None:
    """An agent's own hang (new records) and a timeout (older records, through the migration) count."""
    folder = _copy_set(tmp_path)
    records = _records(folder)
    hung = next(r for r in records if r["run_id"] == "t2_add_endpoint__agents_md__r01")
    hung.update(record_schema=2, hang="agent_hang", stalled=True, success=False, failing_stage="agent_hang")
    timed = next(r for r in records if r["run_id"] == "t1_fix_pagination__no_agents_md__r01")
    timed.update(timed_out=True)  # schema 1: migrated to hang = "timeout"
    (folder / "runs.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))

    out = tmp_path / "out"
    build_report([folder], out)
    text = (out / "report.md").read_text()
    assert "**Agent hangs:** 2 scored runs ended in the agent's own hang" in text
    assert "per condition: `agents_md`: agent_hang 1; `no_agents_md`: timeout 1." in text
    assert "the agent's own hang (agent_hang)" in (out / "failures.md").read_text()


def test_tokens_and_cost_per_model(tmp_path: Path) -> None:
    """Where runs record usage per model, the report sums each arm's totals and the main model's share
    of them, and names the other models; an arm that records one total has nothing to split."""
    folder = _copy_set(tmp_path)
    records = [migrate(r) for r in _records(folder)]
    split = [r for r in records if r["condition"] == "agents_md"]
    for record in split:
        metrics = record["metrics"]
        total, cost = metrics["total_tokens"], metrics["cost_usd"]
        metrics["model"] = "main-model"
        metrics["per_model"] = {
            "main-model": {"total_tokens": total * 3 // 4, "cost_usd": cost / 2},
            "side-model": {"total_tokens": total - total * 3 // 4, "cost_usd": cost / 2},
        }
    # One run whose usage could not be read whole stays out of the sums.
    split[0]["metrics"].update(complete=False, gaps=["usage in an event the parser does not read"])
    (folder / "runs.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))

    out = tmp_path / "out"
    build_report([folder], out)
    text = (out / "report.md").read_text()
    rows = {row[0]: row for row in _table_rows(text, "| condition | runs split by model")}
    counted = split[1:]
    tokens = sum(r["metrics"]["total_tokens"] for r in counted)
    assert rows["`agents_md`"][1:] == [
        str(len(counted)),
        f"{tokens:,}",
        "75.0%",
        f"${sum(r['metrics']['cost_usd'] for r in counted):.4f}",
        "50.0%",
        f"`side-model` ({len(counted)} runs)",
    ]
    assert rows["`no_agents_md`"][1:3] == ["0", "—"]


def test_stage_order_is_the_packs_gate_then_the_verdicts_after_it() -> None:
    notes_js = load_pack("packs/notes-js")
    assert stage_order([notes_js]) == [*notes_js.spec.gate.stages, "hidden", "verify"]
    # Two packs (rig report --vs): the first pack's stages, then the second's that are new to it.
    new = [s for s in notes_js.spec.gate.stages if s not in BUILTIN.spec.gate.stages]
    assert new == ["syntax", "lint", "tests", "throw-scan", "magic-numbers"]
    assert stage_order([BUILTIN, notes_js]) == [*BUILTIN.spec.gate.stages, *new, "hidden", "verify"]


def test_report_on_the_javascript_pack_names_it_and_orders_by_its_gate(tmp_path: Path) -> None:
    """Records of the notes-js pack: the pack line, its pins, its gate's stage order in failures.md."""
    folder = _copy_set(tmp_path)
    design = json.loads((folder / "experiment.json").read_text())
    design["experiment"]["pack"] = "packs/notes-js"
    (folder / "experiment.json").write_text(json.dumps(design, indent=2, sort_keys=True))
    records = _records(folder)
    # Failing stages of the JavaScript gate, plus one no gate knows (sorted after the verdicts).
    stages = iter(["hidden", "throw-scan", "lint", "audit", "tests", "magic-numbers"] * 10)
    for record in records:
        record["pins"].update(pack="notes-js", pack_hash="c0ffee" * 10 + "abcd")
        if not record["success"]:
            record["failing_stage"] = next(stages)
    (folder / "runs.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))

    out = tmp_path / "out"
    build_report([folder], out)
    text = (out / "report.md").read_text()
    assert "Success means the gate (`npm run check`) exits 0 and the hidden tests pass" in text
    assert (
        "pack: `notes-js` (`packs/notes-js`), gate: `npm run check`, stages: `syntax`, `lint`, `tests`, "
        "`generated`, `throw-scan`, `magic-numbers`, `registry`"
    ) in text
    pins = dict(row[:2] for row in _table_rows(text, "| pin | value |"))
    assert pins["pack"] == "`notes-js`" and pins["pack hash"] == "`c0ffeec0ffee`"
    assert _failing_stages(out) == ["lint", "tests", "throw-scan", "magic-numbers", "hidden", "audit"]
    _check_failures(out, [folder])


def test_a_pack_that_cannot_be_read_is_one_line_error(tmp_path: Path) -> None:
    folder = _copy_set(tmp_path)
    design = json.loads((folder / "experiment.json").read_text())
    design["experiment"]["pack"] = "packs/gone"
    (folder / "experiment.json").write_text(json.dumps(design, indent=2, sort_keys=True))
    proc = _rig(str(CONFIG), "--out", str(tmp_path / "out"), root=tmp_path)
    assert proc.returncode == 2
    error = proc.stderr.strip()
    assert len(error.splitlines()) == 1 and error.startswith("error:")
    assert "experiment.json names pack 'packs/gone', which cannot be read" in error
    assert "packs/gone/pack.toml: no pack manifest" in error


def test_a_benchmark_of_many_tasks_is_drawn_one_dot_per_task_and_tabled_in_full(tmp_path: Path) -> None:
    """An imported benchmark of hundreds of tasks: the figure keeps a page's width (each task a dot
    beside its arm's ALL interval, as its caption says) and the cell table still lists every cell."""
    from matplotlib.image import imread

    from rig.report.figures import MAX_TASK_COLUMNS

    n_tasks = 3 * MAX_TASK_COLUMNS
    lines = ["task,arm,ok"] + [
        f"task{i:03d},{arm},{int((i + r) % (3 if arm == 'old' else 2) == 0)}"
        for i in range(n_tasks)
        for arm in ("old", "new")
        for r in range(2)
    ]
    table = tmp_path / "runs.csv"
    table.write_text("\n".join(lines) + "\n")
    out = tmp_path / "bench"
    options = ["--task", "task", "--condition", "arm", "--success", "ok"]
    imported = subprocess.run(
        [RIG, "import", "table", str(table), "--out", str(out), *options],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert imported.returncode == 0, imported.stderr
    report = subprocess.run([RIG, "report", str(out)], capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr
    text = (out / "report.md").read_text()
    assert f"each of the {n_tasks} tasks a dot at its success rate" in text
    cells = text.split("## 2. Success per cell")[1].split("\n## ")[0]
    assert len([line for line in cells.splitlines() if line.startswith("| `task")]) == 2 * n_tasks
    # A column per task would be (1.15 x 121 + 2.5) inches at 130 dpi: over 18,000 pixels wide.
    height, width = imread(out / "figures" / "success_by_task.png").shape[:2]
    assert height > 300 and 500 < width < 1500, (height, width)
