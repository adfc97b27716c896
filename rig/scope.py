"""A task's allowed-file scope: which of the agent's changes fall outside the task's `scope` globs."""

from fnmatch import fnmatchcase

from rig.models import TaskSpec


def out_of_scope(changed: list[str], spec: TaskSpec) -> list[str] | None:
    """The entries of `changed` ("<status> <path>", as `rig.workspace.collect_diff` names them) whose
    path matches none of the task's scope globs; None for a task without a scope.

    Globs are fnmatch patterns on the workspace-relative path, `*` crossing `/`. A path git had to
    quote (an unusual name) is matched quoted, so it lands outside every ordinary glob: listed,
    never silently allowed.
    """
    if spec.scope is None:
        return None
    return [entry for entry in changed if not any(fnmatchcase(_path(entry), glob) for glob in spec.scope)]


def _path(entry: str) -> str:
    _, _, path = entry.partition(" ")
    return path
