"""Step 4, protect: the protected files of the rig's copy, compared and restored."""

from rig.run.steps.collect import Collected
from rig.run.steps.prepare import Prepared
from rig.schema import Tampering
from rig.workspace.protect import compare, restore


def protect(prepared: Prepared, *, collected: Collected) -> Tampering:
    """What the agent did to the protected files of the `prepared` snapshot, as found in the rig's
    copy that `collected` made (every file and symlink of which it names, and whose build and cache
    trees it names as left out); each is restored there byte for byte.
    """
    snapshot, verify_dir = prepared.snapshot, collected.verify_dir
    tampering = compare(snapshot, verify_dir, collected.paths, collected.left_out)
    # copy_tree left every bytecode cache out of the rig's copy: no cache to look for.
    restore(snapshot, verify_dir, tampering, caches=False)
    return tampering
