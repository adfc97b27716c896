"""The capability table: generated from the adapters' declarations, every "no" with its reason,
and an experiment that needs what its harness lacks refused at load with that reason."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harnesses.capabilities import capabilities, undeclared
from harnesses.registry import adapter_class, harness_names
from rig.experiment.load import ExperimentError, load_experiment

RIG = str(Path(sys.executable).with_name("rig"))
PINS = json.loads((Path(__file__).resolve().parents[1] / "harnesses" / "node" / "package.json").read_text())


def test_every_capability_a_harness_lacks_has_its_reason_and_no_reason_is_stale():
    assert undeclared() == []


def test_rig_harness_list_prints_every_harness_with_its_pin_and_reasons():
    proc = subprocess.run([RIG, "harness", "list", "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert list(rows) == list(harness_names())
    for name, row in rows.items():
        package = getattr(adapter_class(name), "package", None)
        assert row["pinned"] == (PINS["dependencies"][package] if package else None)
        assert row["capabilities"] == [
            {"group": c.group, "name": c.name, "supported": c.supported, "detail": c.detail}
            for c in capabilities(name)
        ]
        # Every real CLI is installed by make setup; the scripted agent has none.
        assert (row["cli"] is not None) == (package is not None), row["cli"]
    gemini = {c["name"]: c for c in rows["gemini"]["capabilities"]}
    cache_write = gemini["cache_write"]
    assert not cache_write["supported"] and "no cache-write count" in cache_write["detail"]
    table = subprocess.run([RIG, "harness", "list"], capture_output=True, text=True, timeout=120)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    for name in harness_names():
        assert any(line.startswith(f"│ {name} ") for line in lines), name


CONFIG = """harness = "{harness}"
tasks = ["t1_fix_pagination"]
{extra}
[[conditions]]
name = "a"
"""


@pytest.mark.parametrize(
    ("harness", "extra", "reason"),
    [
        ("codex", "[run_budget]\nmax_cost_usd = 1.0\n", "reports no cost while it runs and genai-prices"),
        ("gemini", "[run_budget]\nmax_cost_usd = 1.0\n", "reports no cost while it runs and genai-prices"),
    ],
)
def test_a_budget_the_harness_cannot_hold_is_refused_with_its_reason(tmp_path, harness, extra, reason):
    path = tmp_path / "exp.toml"
    path.write_text(CONFIG.format(harness=harness, extra=extra))
    with pytest.raises(ExperimentError) as caught:
        load_experiment(path)
    assert reason in str(caught.value) and "\n" not in str(caught.value)
