"""Where the rig's files are, the packs it ships, and where an experiment's results go.

In a checkout, the rig's files are the repository's top level. An installed wheel carries the same
top level (the built-in pack, packs/, the example experiments, the extensions) in the package's
`shipped/` folder, mapped there at build time (setup.py), so every path below means the same in both.
"""

import os
from pathlib import Path

# What setup.py maps the checkout's top level to inside the built package.
SHIPPED = "shipped"
_PACKAGE = Path(__file__).resolve().parent
# True in a git checkout (or a copy of one), False in an installed wheel.
IN_CHECKOUT = not (_PACKAGE / SHIPPED).is_dir()
REPO_ROOT = _PACKAGE.parent if IN_CHECKOUT else _PACKAGE / SHIPPED
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
    an experiment file under the checkout's experiments/ folder, else ./rig-results (an installed
    rig's own experiments included: nothing is written into the installed package). Every command
    asks this, so the readers find the folder `rig run` wrote for the same file.
    """
    if given is not None:
        return given
    if os.environ.get(RESULTS_ROOT_ENV):
        return Path(os.environ[RESULTS_ROOT_ENV]).expanduser()
    if IN_CHECKOUT and experiment_path.resolve().is_relative_to(EXPERIMENTS_DIR):
        return RESULTS_DIR
    return Path(LOCAL_RESULTS)


def portable(path: Path) -> str:
    """A resolved path as an experiment's design stores it (and every results file shows it):
    relative to the rig's files inside them, `~/...` inside the home folder (no user name in a
    results file; the same user loads it back), else absolute. `local` reads it back."""
    if path.is_relative_to(REPO_ROOT):
        return str(path.relative_to(REPO_ROOT))
    home = Path.home().resolve()
    if path.is_relative_to(home):
        return f"~/{path.relative_to(home)}"
    return str(path)


def local(reference: str) -> Path:
    """A path as a design stores it (`portable`, or as an experiment wrote it) on this machine:
    `~` expanded, a relative one under the rig's files."""
    path = Path(reference).expanduser()
    return path if path.is_absolute() else REPO_ROOT / path


def named_in(reference: str, base: Path) -> str | None:
    """A path an experiment file in folder `base` names (a pack, a skill, an extension), as its
    design stores it; None if it is nowhere.

    An absolute path stays as it is. A relative one is taken relative to the experiment file,
    stored `portable`; one that is not there but is under the rig's files stays as written (the
    checkout's experiments name tasks/, packs/ and extensions/ so, and the designs, and the results
    bound to them, keep their digests).
    """
    path = Path(reference).expanduser()
    if path.is_absolute():
        return reference if path.exists() else None
    beside = base / path
    if beside.exists():
        return portable(beside.resolve())
    return reference if (REPO_ROOT / path).exists() else None
