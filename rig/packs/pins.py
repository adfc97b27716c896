"""The pins a passing calibration leaves: the fixture's, each task's and its hidden tests' hashes.

`rig run` checks them (preflight) before it starts; they live in the user's cache, one file per
pack and folder ($RIG_CALIBRATION_DIR moves them).
"""

import hashlib
import os
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError

from rig.schema import CalibratedTask, CalibrationPins, CalibrationReport, Pack, Task
from rig.version import rig_version
from rig.workspace.build import tree_digest

CALIBRATION_ENV = "RIG_CALIBRATION_DIR"


def pins_path(pack: Pack) -> Path:
    """Where the calibration pins of `pack` (by name and folder) are kept."""
    if os.environ.get(CALIBRATION_ENV):
        folder = Path(os.environ[CALIBRATION_ENV]).expanduser()
    else:
        folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rig" / "calibration"
    where = hashlib.sha256(str(pack.root.resolve()).encode()).hexdigest()[:12]
    return folder / f"{pack.name}-{where}.json"


def load_pins(pack: Pack) -> CalibrationPins | None:
    """The pins of `pack`'s last passing calibration here; None if none (or they are unreadable)."""
    try:
        return CalibrationPins.model_validate_json(pins_path(pack).read_bytes())
    except (OSError, ValidationError):
        return None


def save_pins(pack: Pack, tasks: list[Task], report: CalibrationReport) -> Path:
    """Record what a calibration of `tasks` proved: the pins of a passing one (added to those of
    other tasks calibrated with the same fixture), or, if it failed, that nothing is proved."""
    path = pins_path(pack)
    if not report.ok:
        path.unlink(missing_ok=True)
        return path
    fixture = tree_digest(pack.fixture_dir)
    previous = load_pins(pack)
    known = previous.tasks if previous is not None and previous.fixture_hash == fixture else {}
    calibrated = {
        t.id: CalibratedTask(task_hash=tree_digest(t.dir), hidden_tests_hash=tree_digest(t.hidden_dir))
        for t in tasks
    }
    pins = CalibrationPins(
        pack=pack.name,
        root=str(pack.root.resolve()),
        fixture_hash=fixture,
        tasks={**known, **calibrated},
        calibrated_at=datetime.now(UTC),
        rig_version=rig_version(),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".json.partial")
    partial.write_text(pins.model_dump_json(indent=2) + "\n")
    partial.replace(path)
    return path
