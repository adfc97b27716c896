"""Loading a pack's tasks: `tasks/<id>/task.toml` plus its patches, validated into rig.schema.Task."""

from pathlib import Path

from pydantic import ValidationError

from rig.packs.manifest import load_pack
from rig.packs.tomlfile import first_error, read_toml
from rig.runners.registry import kind_of
from rig.schema import Pack, Task, TaskSpec
from rig.workspace.bases import materialize
from rig.workspace.build import WorkspaceError

MIN_DECOYS = 2


class TaskError(Exception):
    """A task directory that cannot be used; the message names the file and the fix."""


def load_task(task_dir: Path, pack: Pack, hidden_root: Path | None = None) -> Task:
    """Load and validate one task directory of `pack` (its hidden tests under `hidden_root`, by
    default the pack's); raise TaskError with a one-line reason. A task with a `base` gets the pack
    as seen from it (Pack.at), the base written out on this machine first."""
    toml_path = task_dir / "task.toml"
    if not toml_path.is_file():
        raise TaskError(f"{toml_path}: missing; every task directory needs a task.toml")
    data = read_toml(toml_path, TaskError)
    try:
        spec = TaskSpec.model_validate(data)
    except ValidationError as exc:
        where, message = first_error(exc)
        raise TaskError(f"{toml_path}: {where}: {message}; fix the field") from None
    if spec.id != task_dir.name:
        raise TaskError(f"{toml_path}: id {spec.id!r} differs from its directory name {task_dir.name!r}")
    if spec.base is not None:
        try:
            pack = pack.plain.at(materialize(pack.root, spec.base), spec.environment == "base")
        except WorkspaceError as exc:
            raise TaskError(f"{toml_path}: {exc}") from None
    task = Task(spec=spec, dir=task_dir, hidden_dir=(hidden_root or pack.hidden_dir) / spec.id, pack=pack)
    for path in (task.setup_patch, task.solution_patch):
        if not path.is_file():
            raise TaskError(f"{path}: missing; create it (setup.patch may be empty)")
    on_disk = {p.stem for p in (task_dir / "decoys").glob("*.patch")}
    declared = set(spec.decoys)
    if on_disk != declared:
        raise TaskError(
            f"{toml_path}: decoys declared {sorted(declared)} but decoys/ holds {sorted(on_disk)}; "
            "make them match"
        )
    # A mined task keeps only the decoys that could be generated and failed: its baseline, the
    # real code before the fix, is already a wrong state measured to fail.
    if len(declared) < MIN_DECOYS and spec.source is None:
        raise TaskError(f"{toml_path}: {len(declared)} decoys; every task needs at least {MIN_DECOYS}")
    if not task.hidden_dir.is_dir():
        raise TaskError(f"{task.hidden_dir}: missing; every task needs hidden tests")
    kind = pack.spec.runner.kind
    if spec.hidden_at == "own-paths" and not kind_of(kind).at_own_paths:
        raise TaskError(
            f'{toml_path}: hidden_at = "own-paths", but runner kind {kind!r} takes its hidden tests '
            'as one folder; set hidden_at = "folder"'
        )
    return task


def load_tasks(
    pack: Pack | None = None,
    only: list[str] | None = None,
    tasks_root: Path | None = None,
    hidden_root: Path | None = None,
) -> list[Task]:
    """Every task of `pack` (default: the built-in one), or just `only`, sorted by id.

    `tasks_root` and `hidden_root` replace the pack's folders (a copy of its tasks, say).
    """
    pack = pack or load_pack()
    tasks_root = tasks_root or pack.tasks_dir
    if not tasks_root.is_dir():
        raise TaskError(f"{tasks_root}: no such tasks directory; fix tasks = in {pack.root / 'pack.toml'}")
    names = sorted(p.name for p in tasks_root.iterdir() if (p / "task.toml").exists())
    if not names:
        raise TaskError(
            f"{tasks_root}: no task directories (tasks/<id>/task.toml); add a task or fix the pack"
        )
    if only:
        unknown = sorted(set(only) - set(names))
        if unknown:
            raise TaskError(f"unknown task {', '.join(unknown)}; known: {', '.join(names)}")
        names = [n for n in names if n in only]
    return [load_task(tasks_root / name, pack, hidden_root) for name in names]
