"""What a built environment keeps of the project it was built from: its metadata and what its
install generated, never its sources or tests.

An environment is shared by every tree whose dependency files match, and it is built from the first
such tree (the pack's snapshot, or a base later than a task's own), whose sources hold the fix of
every task older than it. Every agent of the pack can read the environment, so the copy the install
ran in is emptied before the environment counts as built.
"""

import os
from collections.abc import Callable
from pathlib import Path


def seal(copy: Path, log: Path, kept: Callable[[Path], bool] = lambda _rel: False) -> None:
    """Remove from the project's `copy` every file and link but those `kept` accepts (given its
    path relative to the copy; a folder it accepts is kept whole), and the folders left empty.

    The copy is the tree the environment was first built from (the snapshot, or a later base than
    a task's own): its sources and tests hold the fix of every task older than it, and every agent
    can read the environment. What the install made of it stays where it is needed: the metadata
    in site-packages, generated files in GENERATED_DIR, a node project's node_modules."""
    removed = 0
    folders: list[Path] = []
    for folder, dirs, files in os.walk(copy):
        here = Path(folder)
        folders.append(here)
        for name in list(dirs):
            rel = (here / name).relative_to(copy)
            if kept(rel):
                dirs.remove(name)
            elif (here / name).is_symlink():
                dirs.remove(name)
                (here / name).unlink()
                removed += 1
        for name in files:
            if not kept((here / name).relative_to(copy)):
                (here / name).unlink()
                removed += 1
    for folder in reversed(folders):
        if not any(folder.iterdir()):
            folder.rmdir()
    with log.open("a", encoding="utf-8") as out:
        out.write(f"the project's sources and tests removed from the environment's copy ({removed} files)\n")
