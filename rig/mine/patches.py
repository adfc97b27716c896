"""A mined task's patches, made in a git copy of the pack's fixture, and its decoys' patches.

The setup is the reverse of the whole fix commit applied to the fixture; the solution is the fix's
change to the source on top of it. Both are regenerated against the fixture (not the commit's own
diff), so they apply exactly. A decoy is the solution with one of its changes (diff hunks) left
out, or with only its first file.
"""

import re
import shutil
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from rig.mine.history import Commit, Skip, Split, commit_diff, tree_diff
from rig.runners.registry import kind_of
from rig.schema import IN_FOLDER, Pack, Placement
from rig.workspace.bases import keep
from rig.workspace.build import DIFF_FLAGS, WorkspaceError, copy_fixture, git_bytes

# Decoys that leave one change out: the first changes of the solution, at most this many.
MAX_PARTIAL_DECOYS = 4
# Files below a hidden test's folder put back from the pristine tree, at most.
MAX_COMPANIONS = 500


def _scratch_git(args: list[str], cwd: Path) -> bytes:
    return git_bytes(["-c", "core.bigFileThreshold=1", *args], cwd)


def _apply(work: Path, patch: Path, *flags: str) -> None:
    _scratch_git(["apply", "--binary", "--whitespace=nowarn", *flags, str(patch)], work)


def _git_complaint(exc: WorkspaceError) -> str:
    """git's own first line out of a WorkspaceError (`git apply ... failed in DIR: LINE`)."""
    return str(exc).split(": ", 1)[-1]


@dataclass(frozen=True)
class Patches:
    setup: Path
    solution: Path


def _git_copy(fixture: Path, dest: Path) -> Path:
    """A copy of `fixture` at `dest`, committed in a git repository of its own."""
    work = copy_fixture(fixture, dest)
    _scratch_git(["init", "-q", "-b", "main", "--template="], work)
    _commit(work, "fixture")
    return work


def _commit(work: Path, message: str) -> None:
    _scratch_git(["add", "-A", "-f"], work)
    _scratch_git(["commit", "-q", "--no-verify", "--allow-empty", "-m", message], work)


def _staged(work: Path, dest: Path) -> Path:
    """Everything changed in `work` since its last commit, as a patch written to `dest`."""
    _scratch_git(["add", "-A", "-f"], work)
    dest.write_bytes(_scratch_git(["diff", "--cached", *DIFF_FLAGS, "HEAD"], work))
    return dest


def build(repo: Path, commit: Commit, files: Split, pack: Pack, scratch: Path) -> Patches:
    """setup.patch and solution.patch of `commit` against the fixture, made in a git copy of it."""
    work = _git_copy(pack.fixture_dir, scratch / "repo")
    whole, source = scratch / "commit.diff", scratch / "source.diff"
    # The protected files the fix changed stay as the snapshot has them (measuring says whether
    # its tests pass so).
    whole.write_bytes(commit_diff(repo, commit, leave_out=files.protected))
    source.write_bytes(commit_diff(repo, commit, files.source))
    try:
        _apply(work, whole, "--check", "-R")
    except WorkspaceError as exc:
        raise Skip(
            "conflict", f"its reverse does not apply to the snapshot ({_git_complaint(exc)})"
        ) from None
    _apply(work, whole, "-R")
    setup = _staged(work, scratch / "setup.patch")
    _commit(work, "setup")
    try:
        _apply(work, source)
    except WorkspaceError as exc:
        raise Skip("conflict", f"the fix does not apply after its reverse ({_git_complaint(exc)})") from None
    return Patches(setup, _staged(work, scratch / "solution.patch"))


@dataclass(frozen=True)
class AtParent:
    """A task that starts at its fix's parent: its patches, its base (the git tree hash of the
    fixture with the repository's files as the parent has them, kept by rig.workspace.bases), and
    a tree holding the fix's own version of its tests."""

    patches: Patches
    tree: str
    tests: Path


def build_at_parent(
    repo: Path, commit: Commit, files: Split, pack: Pack, snapshot: str, scratch: Path
) -> AtParent:
    """The task of `commit` at its parent: the fixture taken back from the snapshot to the parent
    (files the pack added to the fixture stay), where the fix's tests are absent or as they were;
    an empty setup; the fix's change to the source as the solution."""
    parent = commit.parents[0]
    work = _git_copy(pack.plain.fixture_dir, scratch / "repo")
    back, source, tests = scratch / "back.diff", scratch / "source.diff", scratch / "tests.diff"
    back.write_bytes(tree_diff(repo, snapshot, parent))
    source.write_bytes(commit_diff(repo, commit, files.source))
    tests.write_bytes(commit_diff(repo, commit, files.tests))
    if back.stat().st_size:
        try:
            _apply(work, back)
        except WorkspaceError as exc:
            raise Skip(
                "conflict",
                f"the fixture does not go back to the fix's parent {parent[:12]}: it differs from the "
                f"snapshot there ({_git_complaint(exc)})",
            ) from None
    _commit(work, "base")
    tree = keep(work)
    setup = scratch / "setup.patch"
    setup.write_bytes(b"")
    try:
        _apply(work, source)
    except WorkspaceError as exc:
        raise Skip("conflict", f"the fix does not apply at its own parent ({_git_complaint(exc)})") from None
    solution = _staged(work, scratch / "solution.patch")
    _commit(work, "solution")
    _apply(work, tests)
    return AtParent(Patches(setup, solution), tree, work)


def companions(files: Split, fixture: Path) -> list[str]:
    """The pristine files the commit's tests run beside, which verification puts back over the
    agent's: everything below each test's folder (its helpers, data, other tests), when the fix
    changes nothing there, and the `__init__.py` files of the folders above it. A folder holding
    more than MAX_COMPANIONS files gives only the files directly in it."""
    found: dict[str, None] = {}
    for folder in dict.fromkeys(PurePosixPath(rel).parent for rel in files.tests):
        for above in folder.parents:
            if above != PurePosixPath(".") and (fixture / above / "__init__.py").is_file():
                found[(above / "__init__.py").as_posix()] = None
        if folder == PurePosixPath(".") or any(
            PurePosixPath(rel).is_relative_to(folder) for rel in files.source
        ):
            continue
        below = sorted(
            p for p in (fixture / folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts
        )
        if len(below) > MAX_COMPANIONS:
            below = sorted(p for p in (fixture / folder).iterdir() if p.is_file())
        found.update((p.relative_to(fixture).as_posix(), None) for p in below)
    return [rel for rel in found if rel not in files.tests]


def hidden_tests(files: Split, pack: Pack, dest: Path, tests_from: Path | None = None) -> Placement:
    """Copy the commit's tests (from the tree `tests_from`, default the snapshot) into `dest`, and
    say where they run. At their own paths (`dest` mirrors the tree) wherever the runner kind
    allows, with their pristine companions from the task's starting tree; else as one folder, with
    the files beside them their kind's tests need."""
    tests_from = tests_from or pack.fixture_dir
    if kind_of(pack.spec.runner.kind).at_own_paths:
        found = [(tests_from, rel) for rel in files.tests]
        found += [(pack.fixture_dir, rel) for rel in companions(files, pack.fixture_dir)]
        for tree, rel in found:
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(tree / rel, dest / rel)
        return Placement(at="own-paths", tests=tuple(files.tests))
    wanted: dict[str, Path] = {}
    for rel in files.tests:
        name = PurePosixPath(rel).name
        if name in wanted:
            raise Skip("hidden-clash", f"two of its tests are named {name}; the hidden tests are one folder")
        wanted[name] = tests_from / rel
    for companion in kind_of(pack.spec.runner.kind).hidden_companions:
        beside = {(pack.fixture_dir / rel).parent / companion for rel in files.tests}
        present = [c for c in beside if c.is_file()]
        if len(present) > 1:
            raise Skip("hidden-clash", f"its tests come from folders with different {companion} files")
        if present:
            wanted[companion] = present[0]
    dest.mkdir(parents=True)
    for name, source in wanted.items():
        shutil.copyfile(source, dest / name)
    return IN_FOLDER


def _sections(patch: bytes) -> list[tuple[bytes, list[bytes]]]:
    """A git diff as (file header, hunks) per file; a binary file is one header, no hunks."""
    out = []
    for chunk in re.split(rb"(?m)^(?=diff --git )", patch):
        if not chunk.strip():
            continue
        header, *hunks = re.split(rb"(?m)^(?=@@ )", chunk)
        out.append((header, hunks))
    return out


def _join(sections: list[tuple[bytes, list[bytes]]]) -> bytes:
    return b"".join(header + b"".join(hunks) for header, hunks in sections)


def _file(header: bytes) -> str:
    """The path a diff section changes, for people."""
    path = re.search(rb"^\+\+\+ b/(.*)$", header, re.MULTILINE) or re.search(
        rb"^--- a/(.*)$", header, re.MULTILINE
    )
    return path.group(1).decode(errors="replace") if path else "a file"


def _line(hunk: bytes) -> int:
    """The first line of the old file a hunk covers."""
    match = re.match(rb"@@ -(\d+)", hunk)
    return int(match.group(1)) if match else 0


def decoy_patches(solution: bytes) -> list[tuple[str, str, bytes]]:
    """(name, reason, patch) of each decoy the solution allows."""
    sections = _sections(solution)
    changes = [(i, j) for i, (_, hunks) in enumerate(sections) for j in range(len(hunks))]
    out = []
    if len(changes) > 1:
        for n, (i, j) in enumerate(changes[:MAX_PARTIAL_DECOYS], 1):
            kept = [
                (header, [h for k, h in enumerate(hunks) if (a, k) != (i, j)])
                for a, (header, hunks) in enumerate(sections)
            ]
            # A file whose only change is left out is left out whole (its header alone is no patch).
            kept = [
                (h, hunks) for (h, hunks), (_, old) in zip(kept, sections, strict=True) if hunks or not old
            ]
            at = f"{_file(sections[i][0])}:{_line(sections[i][1][j])}"
            reason = f"the fix without its change at {at}: a partial fix"
            out.append((f"partial_fix_{n}", reason, _join(kept)))
    if len(sections) > 1:
        reason = f"the fix made in {_file(sections[0][0])} only, the first file it changes"
        out.append(("first_file_only", reason, _join(sections[:1])))
    # Two files of one change each: leaving out the second is the first file alone.
    unique: dict[bytes, tuple[str, str, bytes]] = {}
    for decoy in out:
        unique.setdefault(decoy[2], decoy)
    return list(unique.values())
