"""A task's allowed-file scope: which of the agent's changes fall outside the task's `scope` globs."""

import tempfile
from fnmatch import fnmatchcase
from pathlib import Path

from rig.schema import TaskSpec
from rig.workspace.build import git_bytes


def out_of_scope(changed: list[str], spec: TaskSpec) -> list[str] | None:
    """The entries of `changed` ("<status> <path>", as `rig.workspace.build.collect_diff` names them) whose
    path matches none of the task's scope globs; None for a task without a scope.

    Globs are fnmatch patterns on the workspace-relative path, `*` crossing `/`. A path git had to
    quote (an unusual name) is matched quoted, so it lands outside every ordinary glob: listed,
    never silently allowed.
    """
    if spec.scope is None:
        return None
    return [entry for entry in changed if _outside(_path(entry), spec.scope)]


def _outside(path: str, scope: list[str]) -> bool:
    return not any(fnmatchcase(path, glob) for glob in scope)


def _path(entry: str) -> str:
    _, _, path = entry.partition(" ")
    return path


def patch_out_of_scope(patch: Path, spec: TaskSpec) -> list[str] | None:
    """The paths a git patch changes outside the task's scope (a rename: both its paths); None for a
    task without a scope. `rig calibrate` fails a reference solution that leaves its own scope."""
    if spec.scope is None:
        return None
    # Inside a repository's subdirectory (tasks/ is in the rig's), git apply would skip every path
    # outside that subdirectory: it reads the patch from an empty directory of its own instead.
    with tempfile.TemporaryDirectory(prefix="rig-scope-") as empty:
        fields = git_bytes(["apply", "--numstat", "-z", "-"], Path(empty), stdin=patch.read_bytes()).split(
            b"\0"
        )
    paths: list[bytes] = []
    index = 0
    while index < len(fields):
        parts = fields[index].split(b"\t", 2)
        index += 1
        if len(parts) < 3:
            continue
        if parts[2]:
            paths.append(parts[2])
        else:
            # A rename leaves the path empty: its old and new paths are the next two fields.
            paths += fields[index : index + 2]
            index += 2
    names = [p.decode(errors="replace") for p in paths]
    return [name for name in names if _outside(name, spec.scope)]
