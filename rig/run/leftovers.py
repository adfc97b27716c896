"""What a killed runner leaves behind, made safe on the next start: unrecorded attempt folders and
workspaces nobody runs any more.

An attempt folder gets its record (and with it its redaction) only when its run ends; a runner
killed mid-run leaves the raw session, streams and agent home of the runs in flight. `abandon`
redacts every attempt folder that has no record in runs.jsonl or quarantine.jsonl the way a
recorded one is, and marks it with `abandoned.json` (why, when): evidence kept, nothing revealed.

Every tree an attempt makes (its workspace, the rig's verification copy) is claimed by the runner
while it exists: a `.runner.lock` file inside it, flock-ed by the runner. The kernel releases the
lock when the runner dies however it died, so a tree whose lock file is there but free belongs to
nobody and is removed (`remove_stale`); a tree the runner was asked to keep (`--keep-workspaces`)
has its lock file deleted first and is never taken for stale. Workspaces are removed by the next
runner of their experiment; the verification copies under the one copy root
(rig.workspace.scratch.copy_root) by the next runner of any experiment (`remove_stale_copies`),
since a copy in memory holds memory until a reboot. Runners of other experiments sweep that root
while this one makes copies in it, so a claim file is never seen unlocked.
"""

import contextlib
import fcntl
import json
import os
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from rig.confine.untrusted import remove, remove_trees
from rig.store import runs_cache
from rig.store.redact import Redactor
from rig.store.results import ATTEMPT_RE, RUN_ID_RE, ResultsStore
from rig.workspace.scratch import COPY_PREFIX, copy_root

CLAIM_FILE = ".runner.lock"
ABANDONED_FILE = "abandoned.json"
ABANDONED_REASON = "the runner stopped (killed or crashed) before this attempt was recorded"


def claim(tree: Path) -> int:
    """Mark `tree` (a directory just made by this runner) as in use; the returned descriptor holds
    the claim until `release`."""
    # Locked under another name, then renamed: a sweep that found the claim file unlocked between
    # its creation and its lock would remove a live tree, or hold the lock as it was taken.
    making = tree / f"{CLAIM_FILE}.new"
    fd = os.open(making, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(making, tree / CLAIM_FILE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def release(tree: Path, fd: int, kept: bool) -> None:
    """End the claim on `tree`; a tree `kept` loses its lock file so it is never taken for stale."""
    if kept:
        (tree / CLAIM_FILE).unlink(missing_ok=True)
    os.close(fd)


def _is_stale(tree: Path) -> bool:
    """Whether `tree` was claimed by a runner that is gone: its lock file is there and free."""
    try:
        fd = os.open(tree / CLAIM_FILE, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False  # never claimed (made by an older rig, or not claimed yet), or kept
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True
    finally:
        os.close(fd)


def _dirs(folder: Path) -> Iterator[Path]:
    """The real directories (no symlinks) directly in `folder`."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            yield Path(entry.path)


def stale_trees(workspaces: Path) -> list[Path]:
    """The workspaces and verification copies in `workspaces` (an experiment's folder under the
    runs root) whose runner is gone."""
    return sorted(tree for tree in _dirs(workspaces) if _is_stale(tree))


def remove_stale(workspaces: Path) -> tuple[list[Path], list[str]]:
    """Remove the trees `stale_trees` finds; (removed, problems with those that stayed)."""
    stale = stale_trees(workspaces)
    problems = remove_trees(stale)
    return [t for t, p in zip(stale, problems, strict=True) if p is None], [p for p in problems if p]


def stale_copies(root: Path) -> list[Path]:
    """The verification copies under `root` (the copy root: a folder per experiment, a `verify-*`
    folder per copy) whose runner is gone. No link is followed; a copy a live runner holds, one not
    claimed yet and one kept are never among them."""
    return sorted(
        copy
        for folder in _dirs(root)
        for copy in _dirs(folder)
        if copy.name.startswith(COPY_PREFIX) and _is_stale(copy)
    )


def remove_stale_copies(root: Path | None) -> tuple[list[Path], list[str]]:
    """Remove the copies `stale_copies` finds under `root` (None: there is no copy root), and the
    experiments' folders they leave empty; (removed, problems with those that stayed)."""
    if root is None:
        return [], []
    stale = stale_copies(root)
    problems = remove_trees(stale)
    for folder in sorted({copy.parent for copy in stale}):
        # Only if empty: a runner of that experiment may have a copy in it, or be about to make one
        # (it makes the folder again if it went: rig.run.steps.collect).
        with contextlib.suppress(OSError):
            folder.rmdir()
    return [c for c, p in zip(stale, problems, strict=True) if p is None], [p for p in problems if p]


def _recorded(store: ResultsStore) -> set[str]:
    """The attempt folders (relative to the results folder) that have a record."""
    scored = runs_cache.scored(store, ["artifacts"]).column("artifacts").to_pylist()
    quarantined = [r.get("artifacts") for r in store.read_quarantine()]
    return {os.path.normpath(a) for a in [*scored, *quarantined] if isinstance(a, str)}


def _attempts(store: ResultsStore) -> Iterator[Path]:
    """Every attempt folder of `store`: runs/<run_id>/attempt-<n>, real directories only."""
    for run_dir in _dirs(store.root / "runs"):
        if RUN_ID_RE.fullmatch(run_dir.name):
            yield from (p for p in _dirs(run_dir) if ATTEMPT_RE.fullmatch(p.name))


def abandon(store: ResultsStore, redactor: Redactor) -> list[Path]:
    """Redact and mark abandoned every attempt folder of `store` without a record; the folders
    marked now (those marked before are redacted again, which changes nothing, and not counted).

    Only while no runner writes the experiment (`ResultsStore.writer`): a run in flight has no
    record yet either.
    """
    recorded = _recorded(store)
    marked = []
    for folder in sorted(_attempts(store)):
        rel = folder.relative_to(store.root).as_posix()
        if rel in recorded:
            continue
        # Redacted again on every start (it changes nothing twice): a marker alone, which whatever
        # wrote into the folder could forge, must not exempt it.
        redactor.tree(folder)
        marker = folder / ABANDONED_FILE
        try:
            if stat.S_ISREG(os.lstat(marker).st_mode):
                continue
        except FileNotFoundError:
            pass
        remove(marker)
        note = {"reason": ABANDONED_REASON, "when": datetime.now(UTC).isoformat(timespec="seconds")}
        marker.write_text(json.dumps(note, indent=2) + "\n")
        marked.append(folder)
    return marked


@dataclass
class Cleanup:
    """What `clean_up` did, for the user."""

    abandoned: list[Path] = field(default_factory=list)
    removed: list[Path] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    copies: list[Path] = field(default_factory=list)
    """Verification copies of any experiment removed from the copy root."""
    copy_problems: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """One line per kind of thing done or left."""
        out = []
        if self.abandoned:
            out.append(
                f"{len(self.abandoned)} attempt folders of runs a stopped runner never recorded were "
                f"redacted and marked abandoned ({ABANDONED_FILE})"
            )
        if self.removed:
            out.append(f"{len(self.removed)} workspaces left by a stopped runner were removed")
        if self.copies:
            out.append(
                f"{len(self.copies)} verification copies left by stopped runners were removed from "
                f"{self.copies[0].parent.parent}"
            )
        out += [f"warning: stale workspace not removed: {p}" for p in self.problems]
        out += [f"warning: stale verification copy not removed: {p}" for p in self.copy_problems]
        return out


def clean_up(store: ResultsStore, workspaces: Path, redactor: Redactor) -> Cleanup:
    """`abandon` the unrecorded attempts of `store`, `remove_stale` the trees in `workspaces`, and
    `remove_stale_copies` of every experiment from the copy root; the caller holds the experiment's
    one-writer lock."""
    abandoned = abandon(store, redactor)
    removed, problems = remove_stale(workspaces)
    return Cleanup(abandoned, removed, problems, *remove_stale_copies(copy_root()))


def sweep_copies() -> Cleanup:
    """`remove_stale_copies` of every experiment from the copy root alone: what `rig status
    --repair` of an experiment that never ran can still clean up."""
    return Cleanup([], [], [], *remove_stale_copies(copy_root()))


# How long `rig doctor` spends measuring the runs root: du walks any tree without recursion limits.
DU_TIMEOUT_S = 60.0


def _bytes_under(root: Path) -> int | None:
    """The disk space the tree at `root` takes (GNU du: no links followed, one file system)."""
    try:
        proc = subprocess.run(
            ["du", "-s", "-B1", "--one-file-system", "--", str(root)],
            capture_output=True,
            text=True,
            timeout=DU_TIMEOUT_S,
            env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    try:
        return int(proc.stdout.split()[0])
    except (IndexError, ValueError):
        return None


def usage(runs_root: Path) -> str:
    """What the runs root holds: workspaces (and how many a stopped runner left) and disk space."""
    if not runs_root.is_dir():
        return "empty (not created yet)"
    trees = [tree for experiment in _dirs(runs_root) for tree in _dirs(experiment)]
    stale = sum(_is_stale(tree) for tree in trees)
    size = _bytes_under(runs_root)
    shown = "size unknown" if size is None else f"{size / 2**20:.1f} MiB"
    left = ""
    if stale:
        left = f" ({stale} left by stopped runners: the next `rig run` of their experiment removes them)"
    return f"holds {len(trees)} workspaces{left}, {shown}"
