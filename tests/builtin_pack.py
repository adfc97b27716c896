"""The built-in pack as the tests use it: the pack, and its fixture, tasks and hidden tests folders."""

from rig.packs.manifest import load_pack

BUILTIN = load_pack()
FIXTURE_DIR = BUILTIN.fixture_dir
TASKS_DIR = BUILTIN.tasks_dir
HIDDEN_TESTS_DIR = BUILTIN.hidden_dir
