"""Hidden tests for t5_migration: Task.due_date added through the whole migration procedure."""

import json
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import taskapp
from taskapp.models_generated import SCHEMA_VERSION, Task
from taskapp.storage.migrate import load_index, load_migration, migrate, rollback
from taskapp.storage.seed import build_seeded_store

ROOT = Path(taskapp.__file__).resolve().parents[1]
SAMPLE = {
    "id": 7,
    "project_id": 1,
    "title": "t",
    "description": "",
    "status": "todo",
    "priority": 2,
    "assignee_id": None,
}


def _new_migration():
    names = load_index()
    assert len(names) == 3, names
    return load_migration(names[-1])


def test_index_lists_the_new_migration():
    names = load_index()
    assert names[:2] == ["0001_initial", "0002_add_priority"]
    assert len(names) == 3 and names[2].startswith("0003_")
    assert (ROOT / "migrations" / f"{names[2]}.py").is_file()


def test_schema_version_bumped_everywhere():
    schema = json.loads((ROOT / "schema" / "models.json").read_text())
    lock = json.loads((ROOT / "schema" / "models.lock").read_text())
    assert schema["version"] == 3
    assert lock["version"] == 3
    assert SCHEMA_VERSION == 3
    assert _new_migration().VERSION == 3


def test_generated_model_comes_from_the_schema():
    due = {f.name: f for f in fields(Task)}["due_date"]
    assert due.default is None
    check = subprocess.run(
        [sys.executable, "scripts/gen_models.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout


def test_up_adds_default_and_keeps_existing_values():
    migration = _new_migration()
    assert migration.TABLE == "tasks"
    assert migration.up(dict(SAMPLE)) == {**SAMPLE, "due_date": None}
    kept = migration.up({**SAMPLE, "due_date": "2026-03-01"})
    assert kept == {**SAMPLE, "due_date": "2026-03-01"}


def test_down_removes_only_the_new_field():
    migration = _new_migration()
    assert migration.down({**SAMPLE, "due_date": "2026-03-01"}) == SAMPLE


def test_seed_migrates_up_and_rolls_back():
    store = build_seeded_store()
    assert store.schema_version == 3
    assert all(task["due_date"] is None for task in store.tables["tasks"].values())
    rollback(store, 2)
    assert store.schema_version == 2
    assert all("due_date" not in t and "priority" in t for t in store.tables["tasks"].values())
    migrate(store)
    assert all(task["due_date"] is None for task in store.tables["tasks"].values())


def test_api_creates_reads_and_updates_due_date(app_client):
    created = app_client.post("/tasks", {"project_id": 1, "title": "Due", "due_date": "2026-12-24"})
    assert created.status == 201
    assert created.json["due_date"] == "2026-12-24"
    assert app_client.get(f"/tasks/{created.json['id']}").json["due_date"] == "2026-12-24"
    moved = app_client.patch(f"/tasks/{created.json['id']}", {"due_date": "2027-01-05"})
    assert moved.json["due_date"] == "2027-01-05"
    cleared = app_client.patch(f"/tasks/{created.json['id']}", {"due_date": None})
    assert cleared.status == 200 and cleared.json["due_date"] is None


def test_api_lists_due_date_and_rejects_bad_dates(app_client):
    assert all("due_date" in task for task in app_client.get("/tasks").json["items"])
    bad = app_client.post("/tasks", {"project_id": 1, "title": "Bad", "due_date": "next friday"})
    assert bad.status == 422
    assert bad.json["error"]["code"] == "INVALID_DATE"
