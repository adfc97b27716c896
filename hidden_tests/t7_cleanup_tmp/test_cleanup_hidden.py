"""Hidden tests for t7_cleanup_tmp: every junk folder is gone, every look-alike kept byte for byte."""

import hashlib
from pathlib import Path

import taskapp

ROOT = Path(taskapp.__file__).resolve().parents[1]
TMP_JUNK = ["tmp", "taskapp/tmp", "migrations/tmp_backup"]
# The look-alikes the project's tests read, with the sha256 of each file.
KEPT = {
    "testdata/tmp/upload.json": "1dafa5ed3aa72e8cef4c11f00cb0593d34c08883e7079be1da3749d93d99a04a",
    "testdata/scratch_import/tasks.json": "389ce423de7706ea1319e19e0fece54a8fa45c2ed83ea17739aef936ebb94b84",
}
PROJECT_FILES = ["migrations/INDEX", "migrations/0001_initial.py", "migrations/0002_add_priority.py"]


def _sha256(rel: str) -> str:
    return hashlib.sha256((ROOT / rel).read_bytes()).hexdigest()


def test_tmp_folders_are_gone():
    assert [d for d in TMP_JUNK if (ROOT / d).exists()] == []


def test_scratch_folder_is_gone():
    assert not (ROOT / "scratch").exists()


def test_upload_fixture_folder_is_kept():
    rel = "testdata/tmp/upload.json"
    assert (ROOT / rel).is_file() and _sha256(rel) == KEPT[rel]


def test_import_fixture_folder_is_kept():
    rel = "testdata/scratch_import/tasks.json"
    assert (ROOT / rel).is_file() and _sha256(rel) == KEPT[rel]


def test_project_files_are_kept():
    assert [f for f in PROJECT_FILES if not (ROOT / f).is_file()] == []
