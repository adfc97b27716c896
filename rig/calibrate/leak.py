"""Calibration's leak probe: nothing a sandboxed agent can read holds a task's answer.

A task's answer is what would let an agent pass without solving it: the lines its reference
solution adds that its starting tree does not have, and the lines of its hidden tests that the
starting tree does not have. The probe looks, by file name, through every place the sandbox shows
an agent again inside the folders it hides (rig.run.runner.agent_readable: the project
environments, the interpreters, node, the harness CLIs), for a file named like one the answer is
in that holds its lines: a copy of the project (an environment built from a later tree, an
installed copy of the same distribution, a mirror), the gold patch's files or the hidden tests.

One walk serves every task of a calibration, bounded in time and in files read; a walk that does
not finish proves nothing, and fails every task's item. Compressed copies (a git object store, a
wheel in a cache) are not read: the sandbox hides the caches and histories rig knows of instead
(docs/confinement.md says which).
"""

import math
import os
import stat
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from rig.schema import ItemResult, Task

# A line shorter than this (stripped) says too little to be a task's answer ("return x", "})").
MIN_LINE = 16
# The bounds of one probe: the walk's time, the candidate files read and the bytes read of each.
PROBE_SECONDS = 60.0
MAX_CANDIDATES = 20_000
MAX_FILE_BYTES = 4 * 1024 * 1024
# A starting tree is read once per calibration, its text files up to this size and count.
TREE_FILE_BYTES = 1024 * 1024
TREE_MAX_FILES = 50_000
_NOT_SOURCES = {".git", "node_modules", "__pycache__", ".venv"}


@dataclass(frozen=True)
class Answer:
    """What would give one task away, by the name of the file it is in."""

    task: str
    lines: dict[str, tuple[bytes, ...]]
    """Per file name (a solution's file, a hidden test), its lines the starting tree lacks, UTF-8."""
    start: Path
    """The task's own starting tree, never looked through."""


def _text_lines(data: bytes) -> Iterable[str]:
    return (line.strip() for line in data.decode("utf-8", errors="replace").splitlines())


def _distinctive(line: str) -> bool:
    return len(line) >= MIN_LINE and any(c.isalnum() for c in line)


def _tree_lines(root: Path) -> Counter[str]:
    """How often each distinctive line occurs in the files of a starting tree (the fixture or a
    base: the rig's own copies, never an agent's), bounded in files and bytes."""
    counts: Counter[str] = Counter()
    seen = 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in _NOT_SOURCES]
        for name in files:
            seen += 1
            if seen > TREE_MAX_FILES:
                return counts
            path = Path(folder, name)
            try:
                info = path.lstat()
                if not stat.S_ISREG(info.st_mode) or info.st_size > TREE_FILE_BYTES:
                    continue
                data = path.read_bytes()
            except OSError:
                continue
            counts.update(line for line in _text_lines(data) if _distinctive(line))
    return counts


def _patch_lines(patch: Path) -> dict[str, tuple[list[str], list[str]]]:
    """Per file a patch changes (its path after the change), the lines it adds and removes, stripped."""
    out: dict[str, tuple[list[str], list[str]]] = {}
    current: tuple[list[str], list[str]] | None = None
    try:
        text = patch.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        if line.startswith("+++ "):
            name = line[4:].split("\t")[0]
            name = name[2:] if name.startswith("b/") else name
            current = None if name == "/dev/null" else out.setdefault(name, ([], []))
        elif line.startswith("--- ") or line.startswith("diff "):
            continue
        elif current is not None and line.startswith("+"):
            current[0].append(line[1:].strip())
        elif current is not None and line.startswith("-"):
            current[1].append(line[1:].strip())
    return out


def answer(task: Task, trees: dict[Path, Counter[str]]) -> Answer:
    """The lines that would give `task` away: those its solution adds, and those of its hidden
    tests, that its starting tree (the fixture or base, with the task's setup applied) lacks.
    `trees` keeps each starting tree's lines, read once for every task starting from it."""
    if task.pack.fixture_dir not in trees:
        trees[task.pack.fixture_dir] = _tree_lines(task.pack.fixture_dir)
    tree = trees[task.pack.fixture_dir]
    # What the setup changes, counted apart: the tree's own count is shared by its tasks.
    setup: Counter[str] = Counter()
    for added, removed in _patch_lines(task.setup_patch).values():
        setup.subtract(removed)
        setup.update(added)
    by_name: dict[str, set[str]] = {}

    def keep(name: str, lines: Iterable[str]) -> None:
        fresh = {line for line in lines if _distinctive(line) and tree[line] + setup[line] <= 0}
        if fresh:
            by_name.setdefault(Path(name).name, set()).update(fresh)

    for name, (added, _removed) in _patch_lines(task.solution_patch).items():
        # A fix's change to the project's tooling (a CI workflow, a pre-commit hook) is boilerplate
        # shared across projects (`uses: actions/checkout@v4`): another project's copy is no leak.
        if not any(part.startswith(".") for part in Path(name).parts):
            keep(name, added)
    for folder, _dirs, files in os.walk(task.hidden_dir):
        for name in files:
            try:
                keep(name, _text_lines(Path(folder, name).read_bytes()))
            except OSError:
                continue
    lines = {name: tuple(sorted(line.encode() for line in found)) for name, found in by_name.items()}
    return Answer(task.id, lines, task.pack.fixture_dir)


def _needed(lines: tuple[bytes, ...]) -> int:
    """How many of a file's distinctive lines a copy must hold to count: half, at least two where
    there are two (one line alone can be a coincidence of a common file name)."""
    return max(min(2, len(lines)), math.ceil(len(lines) / 2))


@dataclass(frozen=True)
class Walk:
    """The files a probe found under the readable places, named like an answer's files."""

    candidates: list[Path]
    problem: str | None
    """Why the walk proves nothing (it did not finish in time, or found too many files)."""


def walk(roots: list[Path], names: set[str], pruned: list[Path]) -> Walk:
    """The regular files under `roots` (resolved folders that exist; links not followed) named one of
    `names`, outside `pruned` (folders the sandbox hides again, the tasks' own trees), bounded in
    time and count: find(1)."""
    if not roots or not names:
        return Walk([], None)
    # Every file listed, and matched here: find's own -name tests (one per name), -path tests of
    # the pruned folders and -size (a stat per file) cost it three times its walk.
    cmd = ["find", "-P", *map(str, roots), "-type", "f", "-print0"]
    try:
        found = subprocess.run(cmd, capture_output=True, timeout=PROBE_SECONDS, check=False)
    except subprocess.TimeoutExpired:
        return Walk([], f"the probe did not finish within {PROBE_SECONDS:.0f} s")
    wanted = {os.fsencode(name) for name in names}
    folders = [(os.fsencode(r) + b"/", False) for r in roots]
    folders += [(os.fsencode(p.resolve()) + b"/", True) for p in pruned if p.exists()]
    paths = [
        Path(os.fsdecode(p))
        for p in found.stdout.split(b"\0")
        if p.rpartition(b"/")[2] in wanted and not _pruned(p, folders)
    ]
    if len(paths) > MAX_CANDIDATES:
        return Walk([], f"the probe found {len(paths)} files to read, over its bound of {MAX_CANDIDATES}")
    return Walk(paths, None)


def _pruned(path: bytes, folders: list[tuple[bytes, bool]]) -> bool:
    """Whether the deepest of `folders` (each a prefix ending in "/", and whether it is pruned) above
    `path` is a pruned one: as in the sandbox, a place shown inside a hidden one is shown (the
    rig's venv inside its checkout)."""
    deepest = max(((len(f), cut) for f, cut in folders if path.startswith(f)), default=(0, False))
    return deepest[1]


def _read(path: Path) -> bytes | None:
    """A regular file's first MAX_FILE_BYTES, read without following a link; None if unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, MAX_FILE_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)


def probe(
    tasks: list[Task], readable: Callable[[Task], list[Path]], pruned: list[Path]
) -> dict[str, ItemResult]:
    """Each task's `leak` item: passed when nothing under `readable(task)` (what its agent can
    read) holds its answer; else the path that does. One walk serves every task."""
    started = time.monotonic()
    trees: dict[Path, Counter[str]] = {}
    answers = [answer(task, trees) for task in tasks]
    places = {
        task.id: tuple(dict.fromkeys(f"{r.resolve()}/" for r in readable(task) if r.exists()))
        for task in tasks
    }
    names = {name for a in answers for name in a.lines}
    roots = sorted({Path(root) for shown in places.values() for root in shown})
    found = walk(roots, names, [*pruned, *(a.start for a in answers)])
    hits: dict[str, str] = {}
    looked = 0
    for path in found.candidates:
        wanted = [
            a
            for a in answers
            if a.task not in hits and path.name in a.lines and f"{path}".startswith(places[a.task])
        ]
        if not wanted:
            continue
        data = _read(path)
        looked += 1
        if data is None:
            continue
        for a in wanted:
            answer_lines = a.lines[path.name]
            # A substring test of each line first (C speed); the file's own lines only for the few
            # that pass it, since an answer line can be part of a longer line of the starting tree.
            if sum(line in data for line in answer_lines) < _needed(answer_lines):
                continue
            held = len(set(answer_lines) & {line.strip() for line in data.splitlines()})
            if held >= _needed(answer_lines):
                hits[a.task] = (
                    f"an agent can read its answer: {path} holds {held} of the {len(answer_lines)} lines "
                    f"of {path.name} that its starting tree lacks; remove that copy or keep it where "
                    "the sandbox hides it (docs/confinement.md)"
                )
    wall = round(time.monotonic() - started, 3)
    read = f"{looked} files named like an answer's read"
    results = {}
    for a in answers:
        where = f"{len(places[a.task])} places its agent can read, {read}"
        if found.problem is not None:
            passed, reason = False, f"{found.problem} over {where}: the pack cannot be shown sealed"
        elif a.task in hits:
            passed, reason = False, hits[a.task]
        else:
            passed, reason = True, f"no copy of its answer where an agent can read ({where})"
        results[a.task] = ItemResult(
            name=f"{a.task} leak", kind="leak", task=a.task, passed=passed, reason=reason, wall_s=wall
        )
    return results
