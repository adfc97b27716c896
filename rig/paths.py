"""Where the repository keeps the fixture, the tasks and the hidden tests."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURE_DIR = REPO_ROOT / "fixtures" / "taskapp"
TASKS_DIR = REPO_ROOT / "tasks"
HIDDEN_TESTS_DIR = REPO_ROOT / "hidden_tests"
RESULTS_DIR = REPO_ROOT / "experiments" / "results"
