"""Where the rig's repository is, the packs it ships, and where an experiment's results go."""

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS_DIR = REPO_ROOT / "experiments"
RESULTS_DIR = EXPERIMENTS_DIR / "results"
# Results of an experiment outside the checkout's experiments/ folder: beside where rig was run.
LOCAL_RESULTS = "rig-results"
RESULTS_ROOT_ENV = "RIG_RESULTS_ROOT"

# The packs shipped with the rig (the built-in pack, at the top, and those of packs/), as an
# experiment names them: `pack = "builtin:NAME"`, NAME from the pack's pack.toml.
BUILTIN_PREFIX = "builtin:"
PACKS_DIR = REPO_ROOT / "packs"


def results_root(experiment_path: Path, given: Path | None = None) -> Path:
    """The folder holding the results folder of the experiment at `experiment_path`.

    `given` (--results-root), else $RIG_RESULTS_ROOT, else the checkout's experiments/results/ for
    an experiment file under the checkout's experiments/ folder, else ./rig-results. Every command
    asks this, so the readers find the folder `rig run` wrote for the same file.
    """
    if given is not None:
        return given
    if os.environ.get(RESULTS_ROOT_ENV):
        return Path(os.environ[RESULTS_ROOT_ENV]).expanduser()
    if experiment_path.resolve().is_relative_to(EXPERIMENTS_DIR):
        return RESULTS_DIR
    return Path(LOCAL_RESULTS)
