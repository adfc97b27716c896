"""Runs that were not sealed (their agent ran without the sandbox, so it could read the hidden tests and
the answers): `rig report` says how many, per arm, near the top of report.md and in report.json, and
says nothing when every run was sealed. The verdict is the `sealed` column of load_runs' frame
(rig.store.columns). The records are the committed small set's, given sandbox verdicts and appended as
`rig run` appends them; no agent runs. `rig view`'s marks are checked in tests/test_view.py, on the
site it builds once.
"""

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rig.analysis import load_runs
from rig.report.report import build_report
from rig.report.sealing import unsealed_json, unsealed_text
from rig.schema import SandboxStatus
from rig.store.columns import is_unsealed, sealed
from rig.store.results import ResultsStore

SMALL = Path(__file__).parent / "data" / "results_small" / "results_small"
SEALED_BOX = SandboxStatus(
    mode="auto", active=True, backend="bwrap", detail="bubblewrap 0.8.0", processes="bwrap-pidns"
).model_dump(mode="json")
UNSEALED_BOX = SandboxStatus(
    mode="off", active=False, backend=None, detail="disabled with --sandbox off", processes="cgroup"
).model_dump(mode="json")
# The runs of the small set made unsealed: three of condition no_agents_md, none of agents_md.
UNSEALED_RUNS = (
    "t1_fix_pagination__no_agents_md__r01",
    "t3_fix_check__no_agents_md__r02",
    "t5_migration__no_agents_md__r03",
)
LINE_START = "**Not sealed:** 3 of 30 scored runs were not sealed (sandbox off or unavailable: the agent"
TABLE_SOURCE = {"kind": "table", "file": "runs.csv", "item": "row 1", "tool_version": None}

Edit = Callable[[dict[str, Any]], None]


def _records() -> list[dict[str, Any]]:
    return [json.loads(line) for line in (SMALL / "runs.jsonl").read_text().splitlines() if line.strip()]


def _folder(root: Path, name: str, unsealed: tuple[str, ...], edit: Edit | None = None) -> Path:
    """A copy of the small set whose records carry a sandbox verdict, unsealed for the run ids
    `unsealed`, then changed by `edit`, appended through the results store as `rig run` appends them."""
    folder = root / name
    shutil.copytree(SMALL, folder)
    (folder / "runs.jsonl").unlink()
    store = ResultsStore(folder)
    for record in _records():
        record["sandbox"] = UNSEALED_BOX if record["run_id"] in unsealed else SEALED_BOX
        record["experiment"] = name  # two copies compared with --vs are two experiments
        if edit is not None:
            edit(record)
        store.append_run(record)
    design = json.loads((folder / "experiment.json").read_text())
    design["experiment"]["name"] = name
    (folder / "experiment.json").write_text(json.dumps(design))
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("unsealed")
    return {"mixed": _folder(root, "mixed", UNSEALED_RUNS), "sealed": _folder(root, "sealed", ())}


def _unsealed_runs(folder: Path, out_dir: Path) -> Any:
    """report.json's `unsealed_runs` for `folder`; None when it has no such field."""
    build_report([folder], out_dir, fmt="json")
    return json.loads((out_dir / "report.json").read_text()).get("unsealed_runs")


def test_the_frame_says_which_runs_were_sealed(folders: dict[str, Path]) -> None:
    df = load_runs(folders["mixed"])
    assert dict(zip(df["run_id"], df["sealed"], strict=True)) == {
        r["run_id"]: r["run_id"] not in UNSEALED_RUNS for r in _records()
    }
    assert load_runs(folders["sealed"])["sealed"].tolist() == [True] * 30


def test_report_md_says_so_near_its_top_naming_the_condition(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    build_report([folders["mixed"]], tmp_path, seed=3)
    text = (tmp_path / "report.md").read_text()
    (line,) = [line for line in text.splitlines() if line.startswith("**Not sealed:**")]
    assert line.startswith(LINE_START) and "their successes are not evidence" in line
    assert line.endswith("Per condition: `no_agents_md` 3 of 15 (docs/confinement.md).")
    assert text.index(line) < text.index("## 1. Design and pins")


def test_report_json_has_the_field_only_when_a_run_was_not_sealed(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    build_report([folders["mixed"]], tmp_path / "mixed", fmt="json")
    mixed = json.loads((tmp_path / "mixed" / "report.json").read_text())
    assert mixed["unsealed_runs"] == {"count": 3, "scored": 30, "by_arm": {"no_agents_md": 3}}
    build_report([folders["sealed"]], tmp_path / "sealed", fmt="json")
    sealed_report = json.loads((tmp_path / "sealed" / "report.json").read_text())
    assert "unsealed_runs" not in sealed_report
    assert sealed_report == {k: v for k, v in mixed.items() if k != "unsealed_runs"}
    # Compared as experiments (--vs), the arm is the experiment.
    build_report([folders["mixed"], folders["sealed"]], tmp_path / "vs", vs=True, fmt="json")
    vs = json.loads((tmp_path / "vs" / "report.json").read_text())
    assert vs["unsealed_runs"] == {"count": 3, "scored": 60, "by_arm": {"mixed": 3}}


@pytest.mark.parametrize(
    ("name", "edit"),
    [
        # An imported record's source never told: a sandbox block in it is not the rig's verdict.
        ("imported", lambda r: r.update(source=TABLE_SOURCE)),
        # Records older than the field, or whose verdict is null.
        ("no_sandbox", lambda r: r.pop("sandbox")),
        ("null_sandbox", lambda r: r.update(sandbox=None)),
    ],
)
def test_records_without_a_verdict_are_never_unsealed(name: str, edit: Edit, tmp_path: Path) -> None:
    folder = _folder(tmp_path, name, UNSEALED_RUNS, edit)
    assert load_runs(folder)["sealed"].isna().all()
    assert _unsealed_runs(folder, tmp_path / "report") is None
    record = next(r for r in _records() if r["run_id"] == UNSEALED_RUNS[0])
    record["sandbox"] = UNSEALED_BOX
    assert sealed(record) is False and is_unsealed(record)
    edit(record)
    assert sealed(record) is None and not is_unsealed(record)


def test_the_words_and_the_field_only_when_a_run_was_not_sealed() -> None:
    scored = {"agents_md": 15, "no_agents_md": 15}
    assert unsealed_text({}, scored, "condition") is None and unsealed_json({}, scored) is None
    one = unsealed_text({"agents_md": 1}, scored, "experiment")
    assert one is not None and one.startswith("**Not sealed:** 1 of 30 scored runs was not sealed")
    assert "Per experiment: `agents_md` 1 of 15 (" in one and "no_agents_md" not in one
    assert unsealed_json({"agents_md": 1, "no_agents_md": 2}, scored) == {
        "count": 3,
        "scored": 30,
        "by_arm": {"agents_md": 1, "no_agents_md": 2},
    }
