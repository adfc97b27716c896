"""Step 4, protect: the protected files of the rig's copy, compared and restored."""

from collections.abc import Iterable
from pathlib import Path

from rig.schema import Tampering
from rig.workspace.protect import Snapshot, compare, restore


def protect(
    snapshot: Snapshot, verify_dir: Path, paths: Iterable[str], left_out: Iterable[str] = ()
) -> Tampering:
    """What the agent did to the protected files of `snapshot`, as found in the rig's copy
    `verify_dir` (every file and symlink of which `paths` names, and whose build and cache trees
    `left_out` names); each is restored there byte for byte.
    """
    tampering = compare(snapshot, verify_dir, paths, left_out)
    # copy_tree left every bytecode cache out of the rig's copy: no cache to look for.
    restore(snapshot, verify_dir, tampering, caches=False)
    return tampering
