"""What the `rig import` tests share: the real CLI run in-process, and the folder an import wrote read
back (every record checked against the schema it claims)."""

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner, Result

from rig.cli import app
from rig.schema import RECORD_SCHEMA_VERSION, ForeignRecord

DATA = Path(__file__).parent / "data" / "imports"


def rig(*args: object) -> Result:
    """`rig ARGS...`, the command line as installed, run in this process."""
    return CliRunner().invoke(app, [str(a) for a in args])


def ok(result: Result) -> str:
    """The command's output, once it succeeded."""
    assert result.exit_code == 0, result.output
    return result.stdout


def one_line_error(result: Result, *fragments: str) -> str:
    """The command failed with exit code 2 and one `error:` line holding every fragment."""
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def imported(folder: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """The scored records, the quarantined ones and the design of an imported folder; every record a
    valid ForeignRecord of the current schema, marked with its source."""
    runs, quarantine = jsonl(folder / "runs.jsonl"), jsonl(folder / "quarantine.jsonl")
    for record in runs + quarantine:
        ForeignRecord.model_validate(record)
        assert record["record_schema"] == RECORD_SCHEMA_VERSION and record["source"]["kind"]
    assert not any(r["infra"]["is_infra"] for r in runs)
    assert all(r["infra"]["is_infra"] for r in quarantine)
    return runs, quarantine, json.loads((folder / "experiment.json").read_text())["experiment"]


def written(folder: Path) -> dict[str, bytes]:
    """The files an import writes, as bytes."""
    return {
        n: (folder / n).read_bytes()
        for n in ("experiment.json", "runs.jsonl", "quarantine.jsonl")
        if (folder / n).exists()
    }


def cells(records: list[dict[str, Any]]) -> dict[tuple[str, str], list[float]]:
    """Each (condition, task)'s outcomes in repetition order: the score where there is one, else 0/1."""
    out: dict[tuple[str, str], list[float]] = {}
    for r in sorted(records, key=lambda r: (r["condition"], r["task"], r["repetition"])):
        value = r["score"] if r["score"] is not None else float(r["success"])
        out.setdefault((r["condition"], r["task"]), []).append(value)
    return out
