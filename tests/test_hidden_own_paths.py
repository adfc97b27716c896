"""Hidden tests at their own paths (mined tasks, task.toml `hidden_at = "own-paths"`) in the node
runner kinds, on the real small projects of tests/data: each file is put where it lives in the tree,
replacing what the agent left there, wrapped beside it and run under the project's config; its id
names its folder, so two files of one name in two folders never share one."""

from pathlib import Path

import pytest
from node_packs import DATA, hidden_run

# (pack, task, the hidden file's stem, a hidden test that passes on the task's starting code)
KINDS = {
    "jest": ("jest_pack", "t1_empty_text", "count_hidden", "punctuation only has no words"),
    "vitest": ("vitest_pack", "t1_trim_dashes", "slug_hidden", "punctuation only is empty"),
    "mocha": ("mocha_pack", "t1_clamp_above", "clamp_hidden", "holds a value below at low"),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_hidden_tests_run_at_their_own_paths(kind: str, tmp_path: Path, offline_npm: None) -> None:
    pack, task, stem, passing = KINDS[kind]
    name = next((DATA / pack / "hidden_tests" / task).iterdir()).name
    # What the agent left at the hidden file's path is replaced.
    outcome = hidden_run(DATA / pack, task, tmp_path, files={f"test/{name}": "the agent's"}, at="test")
    assert outcome.error is None, outcome
    assert f"test/{stem}::{passing}" in outcome.passed, outcome
    assert all(test.startswith(f"test/{stem}::") for test in outcome.passed + outcome.failed), outcome
    work = tmp_path / "work"
    # The wrapper went beside the file, in its own folder; the rig's folder holds no test.
    assert list((work / "test").glob(f"rig-*-{stem}.wrap.*"))
    assert (work / "test" / name).read_text() == (DATA / pack / "hidden_tests" / task / name).read_text()
