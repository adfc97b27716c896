"""Where the rig copies a workspace for verification: memory when there is room, else the runs root.

Creating files is most of what verifying a large workspace costs, and on a tmpfs it costs a
fraction of what it does on a disk (bench/README.md). The copy lives only from the end of the
agent to the end of the record, so it goes to a private directory under /dev/shm when that is a
tmpfs with room for it, bounded per copy; a copy that outgrows its room is redone on the runs
root (rig.run.steps.collect). `$RIG_VERIFY_ROOT` chooses the place instead, `$RIG_VERIFY_ROOM_MIB` the room.

Every copy is claimed by its runner while it exists, as workspaces are (rig.run.leftovers): the
copies under `copy_root()` whose runner is gone are removed by the next `rig run` of any experiment
and by `rig status --repair`.
"""

import contextlib
import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from rig.confine.untrusted import remove_trees
from rig.workspace.build import WorkspaceError, check_agent_root

VERIFY_ROOT_VAR = "RIG_VERIFY_ROOT"
VERIFY_ROOM_VAR = "RIG_VERIFY_ROOM_MIB"
SHM = Path("/dev/shm")
MOUNTS = Path("/proc/self/mounts")
MEMINFO = Path("/proc/meminfo")
MEMORY_FS = ("tmpfs", "ramfs")
# One copy's room: a quarter of what memory and the tmpfs both have free, shared by the workers,
# at most MAX_ROOM; below MIN_ROOM memory is too tight to be worth it.
MIN_ROOM = 512 * 2**20
MAX_ROOM = 4 * 2**30
COPY_PREFIX = "verify-"


@dataclass(frozen=True)
class Scratch:
    """The directory one experiment's verification copies go in, and how many bytes one copy may
    take there.

    `room` is None on a disk (no bound but the disk's own); `note` says why this place was chosen.
    """

    folder: Path
    room: int | None
    note: str

    @property
    def in_memory(self) -> bool:
        """Whether copies here take memory (and are bounded by `room`)."""
        return self.room is not None

    def remove_copies(self) -> list[str]:
        """Remove this experiment's copies in memory (which would hold memory until a reboot):
        those a killed `rig run` left, or those in flight when this one is interrupted; problems
        for what was not removed."""
        if not self.in_memory or not self.folder.is_dir():
            return []
        stale = [p for p in self.folder.iterdir() if p.name.startswith(COPY_PREFIX)]
        return [problem for problem in remove_trees(stale) if problem]

    def close(self) -> None:
        """Remove the folder in memory if no copy is left in it."""
        if self.in_memory:
            with contextlib.suppress(OSError):
                self.folder.rmdir()


def _unescape(field: str) -> str:
    # /proc/self/mounts writes space, tab, newline and backslash as octal escapes.
    for escape, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(escape, char)
    return field


def mount_of(path: Path) -> tuple[Path, str] | None:
    """The mount point `path` is on (the longest one above it) and its file system's type, None if
    unknown."""
    try:
        lines = MOUNTS.read_text().splitlines()
    except OSError:
        return None
    resolved, best, found = path.resolve(), -1, None
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = Path(_unescape(fields[1]))
        # The last mount on a point is the one in effect.
        if resolved.is_relative_to(point) and len(point.parts) >= best:
            best, found = len(point.parts), (point, fields[2])
    return found


def filesystem_type(path: Path) -> str | None:
    """The type of the file system `path` is on (the longest mount point above it), None if unknown."""
    mount = mount_of(path)
    return mount[1] if mount else None


def disk_name(path: Path) -> str:
    """The disk `path` is on as a user finds it: its mount point and file system type, e.g.
    `/home (ext4)`; `path` itself where the mount table cannot be read."""
    mount = mount_of(path)
    return f"{mount[0]} ({mount[1]})" if mount else str(path)


def _mem_available() -> int | None:
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def room_per_copy(path: Path, workers: int) -> int:
    """Bytes one verification copy may take on the memory file system at `path`:
    `$RIG_VERIFY_ROOM_MIB` if set, else a share of the memory free now."""
    chosen = os.environ.get(VERIFY_ROOM_VAR)
    if chosen is not None:
        if not chosen.isdigit():
            raise WorkspaceError(
                f"{VERIFY_ROOM_VAR}={chosen!r} is not a whole number of MiB; set it to one "
                "(0 for copies on disk)"
            )
        return int(chosen) * 2**20
    fs = os.statvfs(path)
    free = fs.f_bavail * fs.f_frsize
    memory = _mem_available()
    if memory is not None:
        free = min(free, memory)
    return min(MAX_ROOM, free // (4 * max(1, workers)))


def _private_dir(path: Path) -> str | None:
    """Make `path` a directory only this user can enter; what is wrong with it if it cannot be."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        return f"cannot create {path}: {exc.strerror}"
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        return f"{path} is not a directory of this user"
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return None


def on_disk(workspaces: Path, why: str) -> Scratch:
    """Copies beside the experiment's workspaces, under the runs root, for the reason `why`."""
    return Scratch(workspaces, None, _beside(why).note)


def _folder(root: Path, workspaces: Path, results: Path) -> Path:
    # Named for the results folder too: two results folders may hold experiments of one name,
    # and each rig removes the stale copies of its own experiment only.
    tag = hashlib.sha256(os.fsencode(results.resolve())).hexdigest()[:12]
    return root / f"{workspaces.name}-{tag}"


@dataclass(frozen=True)
class Place:
    """Where this machine puts verification copies: `root` (None: beside the workspaces, on the
    runs root), the room of one copy there (None on a disk) and why it was chosen."""

    root: Path | None
    room: int | None
    note: str


def verify_place(workers: int, keep_workspaces: bool = False) -> Place:
    """Where verification copies go on this machine, for `workers` runs in parallel.

    `$RIG_VERIFY_ROOT` if set (bounded per copy when it is a memory file system); else, for
    workspaces that are kept, beside them; else a private directory under /dev/shm when that is a
    tmpfs with at least MIN_ROOM per copy; else beside the workspaces.
    """
    chosen = os.environ.get(VERIFY_ROOT_VAR)
    if chosen:
        root = Path(chosen).expanduser().resolve()
        try:
            root.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise WorkspaceError(
                f"cannot create {root} ({VERIFY_ROOT_VAR}): {exc.strerror}; "
                "set it to a directory you can write"
            ) from None
        check_agent_root(root, VERIFY_ROOT_VAR)
        if filesystem_type(root) in MEMORY_FS:
            return Place(root, room_per_copy(root, workers), f"in memory (${VERIFY_ROOT_VAR})")
        return Place(root, None, f"on disk (${VERIFY_ROOT_VAR})")
    if keep_workspaces:
        return _beside("workspaces are kept")
    if filesystem_type(SHM) not in MEMORY_FS:
        return _beside(f"{SHM} is not a tmpfs")
    room = room_per_copy(SHM, workers)
    # A room the user chose is taken as it is; a share of free memory only if worth it.
    chosen_room = VERIFY_ROOM_VAR in os.environ
    if room == 0 or (room < MIN_ROOM and not chosen_room):
        why = (
            f"${VERIFY_ROOM_VAR} is 0" if chosen_room else f"less than {MIN_ROOM // 2**20} MiB free per copy"
        )
        return _beside(why)
    root = default_root()
    problem = _private_dir(root)
    if problem is None:
        try:
            check_agent_root(root, VERIFY_ROOT_VAR)
        except WorkspaceError as exc:
            problem = str(exc)
    if problem:
        return _beside(problem)
    return Place(root, room, "in memory")


def default_root() -> Path:
    """The private directory in memory verification copies go under unless `$RIG_VERIFY_ROOT`
    names another."""
    return SHM / f"rig-{os.getuid()}"


def copy_root() -> Path | None:
    """The one directory every verification copy not beside its workspace is made under (one folder
    per experiment, one `verify-*` folder per copy): `$RIG_VERIFY_ROOT`, else `default_root()`.

    None while there is none yet, or when the directory in memory is not this user's own (/dev/shm
    is shared: another user may have made one of that name, and nothing of this rig is in it).
    """
    chosen = os.environ.get(VERIFY_ROOT_VAR)
    if chosen:
        root = Path(chosen).expanduser().resolve()
        return root if root.is_dir() else None
    root = default_root()
    try:
        st = os.lstat(root)
    except OSError:
        return None
    return root if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() else None


def _beside(why: str) -> Place:
    return Place(None, None, f"beside the workspaces under the runs root ({why})")


def choose_scratch(workspaces: Path, results: Path, workers: int, keep_workspaces: bool = False) -> Scratch:
    """Where the verification copies of the experiment whose workspaces go in `workspaces` (under
    the runs root) and whose records go in `results` are made: in `verify_place`'s root, one
    folder per experiment and results folder, or beside the workspaces."""
    place = verify_place(workers, keep_workspaces)
    if place.root is None:
        return Scratch(workspaces, None, place.note)
    return Scratch(_folder(place.root, workspaces, results), place.room, place.note)
