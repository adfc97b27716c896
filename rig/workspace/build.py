"""Building a workspace: a cache-free copy of the fixture with patches applied."""

import contextlib
import hashlib
import os
import re
import shutil
import stat
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rig.confine.untrusted import is_excluded, name_matcher, read_bounded, walk

CACHE_NAMES = ("__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache", "*.pyc", "*.egg-info")


class PatchError(Exception):
    """A patch that does not apply to the workspace."""


def copy_fixture(fixture: Path, dest: Path) -> Path:
    """Copy the fixture to `dest` (which must not exist), leaving caches behind."""
    shutil.copytree(fixture, dest, ignore=shutil.ignore_patterns(*CACHE_NAMES), symlinks=True)
    return dest


def apply_patch(workdir: Path, patch: Path) -> None:
    """Apply a git-style patch to `workdir`; an empty patch is a no-op."""
    if patch.stat().st_size == 0:
        return
    # The ceiling keeps git from treating an enclosing repository as the patch's root.
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(workdir.parent)}
    proc = subprocess.run(
        ["git", "apply", "--whitespace=nowarn", str(patch.resolve())],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        first = (proc.stderr.strip().splitlines() or ["unknown error"])[0]
        raise PatchError(f"{patch}: does not apply ({first}); regenerate it against the fixture")


def tree_digest(root: Path, *, skip_caches: bool = True) -> str:
    """sha256 over every file's relative path and bytes, in sorted order."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if skip_caches and any(part in ("__pycache__", ".pytest_cache", ".ruff_cache") for part in rel.parts):
            continue
        if path.is_symlink():
            digest.update(f"L {rel.as_posix()} {os.readlink(path)}\n".encode())
        elif path.is_file():
            digest.update(f"F {rel.as_posix()}\n".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


# --- run workspaces -------------------------------------------------------------------------

# Context files harnesses read from every ancestor of their working directory.
CONTEXT_FILES = ("AGENTS.md", "CLAUDE.md", "GEMINI.md")
RIG_GIT_DIR = "rig.git"
# Fixed identity and dates: the baseline commit's hash depends on the workspace content only.
GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "rig",
    "GIT_AUTHOR_EMAIL": "rig@localhost",
    "GIT_COMMITTER_NAME": "rig",
    "GIT_COMMITTER_EMAIL": "rig@localhost",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+0000",
}
# Config a workspace could carry that would make git run the agent's code during the rig's diff.
# A git command over a workspace within the limits takes seconds; this bounds a wedged one.
GIT_TIMEOUT_S = 600.0
SAFE_GIT = ["-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "diff.external="]


class WorkspaceError(Exception):
    """A workspace that cannot be prepared; the message names the cause and the fix."""


def default_runs_root() -> Path:
    """$RIG_RUNS_ROOT, else the user's cache directory (outside any repository)."""
    if os.environ.get("RIG_RUNS_ROOT"):
        return Path(os.environ["RIG_RUNS_ROOT"]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "rig" / "runs"


def check_agent_root(folder: Path, var: str = "RIG_RUNS_ROOT") -> None:
    """Refuse a folder agents work in or read from (the runs root, the verification copies) inside
    a git repository or below a context file (CONTEXT_FILES).

    Harnesses read context files from every ancestor directory (Pi up to `/`) and stop their
    search at a git root: either would leak another project's instructions into the run. `var`
    is the environment variable the error tells the user to set.
    """
    root = folder.resolve()
    for directory in (root, *root.parents):
        for name in CONTEXT_FILES:
            if (directory / name).exists():
                raise WorkspaceError(
                    f"{directory / name} would be read by the agent; choose a directory elsewhere (set {var})"
                )
        if (directory / ".git").exists():
            raise WorkspaceError(
                f"{root} is inside the git repository {directory}; set {var} to a "
                "directory outside any repository"
            )


def git_bytes(args: list[str | bytes], cwd: Path, git_dir: Path | None = None, stdin: bytes = b"") -> bytes:
    """Run git with the rig's fixed identity and safe config; its stdout, byte for byte."""
    # git itself, not GitPython: GitPython's command interface adds the caller's environment to
    # every git it runs (Git.execute updates a copy of os.environ), so a GIT_DIR, GIT_CONFIG_* or
    # GIT_EXEC_PATH of the user's shell would reach git run over a hostile workspace; here git gets
    # only the fixed environment below, raw bytes in and out, and a timeout.
    prefix = ["git", *SAFE_GIT] + ([f"--git-dir={git_dir}", f"--work-tree={cwd}"] if git_dir else [])
    env = git_env(cwd)
    try:
        proc = subprocess.run(
            [*prefix, *args], cwd=cwd, env=env, capture_output=True, input=stdin, timeout=GIT_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        shown = " ".join(a if isinstance(a, str) else a.decode(errors="replace") for a in args[:4])
        raise WorkspaceError(f"git {shown} took over {GIT_TIMEOUT_S:g}s in {cwd}") from None
    if proc.returncode != 0:
        message = proc.stderr.decode(errors="replace").strip().splitlines()
        shown = " ".join(a if isinstance(a, str) else a.decode(errors="replace") for a in args[:4])
        raise WorkspaceError(f"git {shown} failed in {cwd}: {(message or ['?'])[0]}")
    return proc.stdout


def git_env(cwd: Path) -> dict[str, str]:
    """The fixed environment git runs in over rig's own and agent-made trees (HOME at `cwd`)."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(cwd), **GIT_ENV}


def _git(args: list[str], cwd: Path, git_dir: Path | None = None) -> str:
    return git_bytes(list(args), cwd, git_dir).decode(errors="replace")


def _inside(workdir: Path, rel: str, what: str) -> Path:
    path = (workdir / rel).resolve()
    if Path(rel).is_absolute() or not path.is_relative_to(workdir.resolve()):
        raise WorkspaceError(f"{what} {rel!r} leaves the workspace; use a path relative to the fixture")
    return path


def apply_overlays(workdir: Path, remove_files: list[str], write_files: dict[str, str]) -> None:
    """Apply a condition's overlays: remove files (which must exist) and write files."""
    for rel in remove_files:
        path = _inside(workdir, rel, "remove_files entry")
        if not path.exists():
            raise WorkspaceError(
                f"remove_files entry {rel!r} does not exist in the workspace; fix the condition"
            )
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    for rel, content in write_files.items():
        path = _inside(workdir, rel, "write_files entry")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)


def init_baseline(workdir: Path, rig_git_dir: Path, everything: bool = False) -> str:
    """`git init` the workspace, commit the baseline, keep a private copy of the repository.

    The agent sees (and may rewrite) `workdir/.git`; the rig diffs against its own copy,
    outside the workspace, so a rewritten history or git config cannot hide a change.
    `everything`: files the tree's .gitignore names are part of the baseline too (the files a
    project environment derives, such as a version file, are usually ignored by the project).
    """
    # No template (hook samples) and one pack instead of a loose object per file: the private
    # copy below then costs a few files instead of a hundred.
    _git(["init", "-q", "-b", "main", "--template="], workdir)
    # The node_modules a node environment links into the tree is never staged, as in every later diff.
    forced = ["--force", "--", ".", ":(exclude,glob)**/node_modules/**"] if everything else []
    _git(["-c", "core.bigFileThreshold=1", "add", "-A", *forced], workdir)
    _git(["commit", "-q", "--no-verify", "-m", "baseline"], workdir)
    commit = (workdir / ".git" / "refs" / "heads" / "main").read_text().strip()
    shutil.copytree(workdir / ".git", rig_git_dir, symlinks=True)
    return commit


# The rig's own attributes (highest precedence, in its private repository): attributes the agent
# writes into the workspace (.gitattributes) must not change what is staged (line-ending
# conversion, filters, ident) or how it is diffed, or the patch would not reproduce the workspace.
NEUTRAL_ATTRIBUTES = "* -text !eol -filter -ident !working-tree-encoding !diff\n"
# Makes every file of one diff a binary patch: for files whose bytes are not valid UTF-8.
BINARY_ATTRIBUTES = "* -text !eol -filter -ident !working-tree-encoding -diff\n"
DIFF_FLAGS = [
    "--binary",
    "--full-index",
    "--no-ext-diff",
    "--no-textconv",
    "--no-renames",
    "--no-color",
    "--src-prefix=a/",
    "--dst-prefix=b/",
]
_ZERO_OID = b"0" * 40
_REGULAR = (b"100644", b"100755")
# How much of one changed file the audit reads.
TEXT_MAX_BYTES = 4 * 1024 * 1024
# Larger files are staged as a stub naming their size (see _blob).
DIFF_MAX_FILE_BYTES = 32 * 1024 * 1024
_GITLINK = b"160000"
_SYMLINK = b"120000"
_PATHSPEC_CHUNK_BYTES = 64 * 1024


def _set_attributes(rig_git_dir: Path, text: str) -> None:
    info = rig_git_dir / "info"
    info.mkdir(exist_ok=True)
    (info / "attributes").write_text(text)


def quote_path(raw: bytes) -> str:
    """A path as one unambiguous line: as is, or C-quoted the way git quotes it.

    Quoted (in double quotes, with \\n, \\t, \\", \\\\ and octal escapes) when it holds a control
    character, a double quote, a backslash or bytes that are not UTF-8; UTF-8 text stays readable.
    A path shown unquoted never starts with a double quote, so the two forms cannot be confused.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and not any(c in '"\\' or ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        return text
    escapes = {0x07: "\\a", 0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0B: "\\v", 0x0C: "\\f", 0x0D: "\\r"}
    out = []
    for chunk in _utf8_chunks(raw):
        if isinstance(chunk, str):
            for c in chunk:
                if c in '"\\':
                    out.append("\\" + c)
                elif ord(c) < 0x20 or ord(c) == 0x7F:
                    out.append(escapes.get(ord(c), f"\\{ord(c):03o}"))
                else:
                    out.append(c)
        else:
            out.extend(f"\\{b:03o}" for b in chunk)
    return '"' + "".join(out) + '"'


def _utf8_chunks(raw: bytes) -> list[str | bytes]:
    """`raw` split into decoded UTF-8 runs (str) and the invalid bytes between them (bytes)."""
    chunks: list[str | bytes] = []
    while raw:
        try:
            chunks.append(raw.decode("utf-8"))
            break
        except UnicodeDecodeError as exc:
            if exc.start:
                chunks.append(raw[: exc.start].decode("utf-8"))
            chunks.append(raw[exc.start : exc.end])
            raw = raw[exc.end :]
    return chunks


@dataclass(frozen=True)
class _Change:
    """One staged change as `git diff --raw -z` reports it, the path as raw bytes."""

    status: str
    old_mode: bytes
    new_mode: bytes
    old: bytes
    new: bytes
    path: bytes


def _raw_changes(workdir: Path, rig_git_dir: Path, baseline: str) -> list[_Change]:
    """Every staged change against the baseline, renames as a deletion and an addition."""
    out = git_bytes(
        ["diff", "--cached", "--raw", "-z", "--no-abbrev", "--no-renames", baseline], workdir, rig_git_dir
    )
    fields = out.split(b"\0")
    changes = []
    # -z: ":<old mode> <new mode> <old id> <new id> <status>" NUL "<path>" NUL, per change.
    for meta, path in zip(fields[0::2], fields[1::2], strict=False):
        if not meta.startswith(b":"):
            break
        old_mode, new_mode, old, new, status = meta[1:].split(b" ")
        changes.append(_Change(status.decode()[:1], old_mode, new_mode, old, new, path))
    return changes


def _not_utf8_blobs(workdir: Path, rig_git_dir: Path, changes: list[_Change]) -> set[bytes]:
    """Object ids, among the changed files and symlinks, whose content is not valid UTF-8."""
    oids = sorted(
        {
            oid
            for c in changes
            for oid, mode in ((c.old, c.old_mode), (c.new, c.new_mode))
            # A nested repository (gitlink) names a commit of another repository, not content.
            if oid != _ZERO_OID and mode != _GITLINK
        }
    )
    if not oids:
        return set()
    out = git_bytes(["cat-file", "--batch"], workdir, rig_git_dir, stdin=b"".join(o + b"\n" for o in oids))
    bad: set[bytes] = set()
    pos = 0
    while pos < len(out):
        header_end = out.index(b"\n", pos)
        header = out[pos:header_end].split(b" ")
        if len(header) != 3:  # "<oid> missing"
            pos = header_end + 1
            continue
        oid, kind, size = header
        start, pos = header_end + 1, header_end + 1 + int(size) + 1
        if kind == b"blob":
            try:
                out[start : start + int(size)].decode("utf-8")
            except UnicodeDecodeError:
                bad.add(oid)
    return bad


def _pathspec_chunks(paths: list[bytes]) -> list[list[bytes]]:
    """Literal pathspecs, in command lines of bounded length."""
    chunks: list[list[bytes]] = [[]]
    size = 0
    for path in paths:
        spec = b":(literal)" + path
        if chunks[-1] and size + len(spec) > _PATHSPEC_CHUNK_BYTES:
            chunks.append([])
            size = 0
        chunks[-1].append(spec)
        size += len(spec) + 1
    return [c for c in chunks if c]


_cached = name_matcher(CACHE_NAMES)


def _staged(name: str) -> bool:
    """Whether an entry of this name is left out of the diff (build and cache trees, bytecode)."""
    return is_excluded(name) or _cached(name)


def _stub(size: int) -> bytes:
    """What stands in the index for a file larger than DIFF_MAX_FILE_BYTES.

    git would read such a file whole into memory (a 2 GiB file makes `git diff` fail), and a patch
    that size is no evidence anyone reads; the stub keeps the file in the diff and the changed list.
    """
    return f"rig: not stored, {size} bytes (over the {DIFF_MAX_FILE_BYTES} bytes a diff keeps)\n".encode()


class Stager:
    """The rig's private index, built from the files of a workspace as they are handed over.

    Whatever the agent wrote, the index is built in time linear in its files and from the bytes
    themselves: each file's content is hashed here and written to one pack by `git fast-import`,
    then the whole index is written at once (`git update-index --index-info`) by `finish`. Nothing
    the agent wrote changes what is staged: not its .gitignore files, attributes (bytes are stored
    as they are), git config or nested repositories (their files are staged like any other); only
    paths under a build or cache name (EXCLUDED_NAMES, CACHE_NAMES) are left out. A CopySink: fed
    by rig.confine.untrusted.copy_tree, the files are read once, for the copy and the index alike.
    """

    max_bytes = DIFF_MAX_FILE_BYTES

    def __init__(self, workdir: Path, rig_git_dir: Path) -> None:
        self.workdir, self.rig_git_dir = workdir, rig_git_dir
        self.paths: list[str] = []
        """Every file and link handed over, staged or not."""
        self._entries: list[tuple[bytes, bytes, bytes]] = []
        self._dirs: dict[str, bool] = {"": True}
        self._broken = False
        # The private repository as cwd and home: `workdir` may not exist yet (copy_tree makes it).
        self._importer = subprocess.Popen(
            ["git", *SAFE_GIT, f"--git-dir={rig_git_dir}", "fast-import", "--quiet"],
            cwd=rig_git_dir,
            env=git_env(rig_git_dir),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def __enter__(self) -> "Stager":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._importer.returncode is None:
            self._importer.kill()
            self._importer.wait()
        for stream in (self._importer.stdin, self._importer.stderr):
            if stream is not None:
                # Closing flushes what is still buffered, to a process that is gone: nothing lost.
                with contextlib.suppress(BrokenPipeError):
                    stream.close()

    def _wanted(self, rel: str) -> bool:
        directory, _, name = rel.rpartition("/")
        wanted = self._dirs.get(directory)
        if wanted is None:
            wanted = self._dirs[directory] = not any(_staged(part) for part in directory.split("/"))
        return wanted and not _staged(name)

    def _add(self, rel: str, mode: bytes, data: bytes) -> None:
        assert self._importer.stdin is not None
        self.paths.append(rel)
        if self._broken or not self._wanted(rel):
            return
        digest = hashlib.sha1(b"blob %d\0" % len(data))
        digest.update(data)
        oid = digest.hexdigest().encode()
        try:
            self._importer.stdin.writelines((b"blob\ndata %d\n" % len(data), data, b"\n"))
        except BrokenPipeError:
            # The copy goes on without the diff; finish() says why.
            self._broken = True
        self._entries.append((os.fsencode(rel), mode, oid))

    def file(self, rel: str, mode: int, data: bytes | None, size: int) -> None:
        """A regular file: its permission bits, its content (None past max_bytes), its size."""
        self._add(rel, b"100755" if mode & stat.S_IXUSR else b"100644", _stub(size) if data is None else data)

    def link(self, rel: str, target: str) -> None:
        """A symlink and its target."""
        self._add(rel, _SYMLINK, os.fsencode(target))

    def finish(self) -> None:
        """Write the pack and make the index hold exactly the files handed over."""
        assert self._importer.stdin is not None and self._importer.stderr is not None
        try:
            self._importer.stdin.close()
            self._importer.wait(timeout=GIT_TIMEOUT_S)
        except (BrokenPipeError, subprocess.TimeoutExpired):
            self._importer.kill()
            self._importer.wait()
        if self._importer.returncode != 0:
            error = self._importer.stderr.read().decode(errors="replace").strip().splitlines()
            first = (error or [f"exit {self._importer.returncode}"])[0]
            raise WorkspaceError(f"git fast-import failed for {self.workdir}: {first}")
        # In git's order (bytewise), so that each entry lands at the end of the index being built.
        info = b"".join(mode + b" " + oid + b"\t" + path + b"\0" for path, mode, oid in sorted(self._entries))
        git_bytes(["read-tree", "--empty"], self.workdir, self.rig_git_dir)
        git_bytes(["update-index", "-z", "--index-info"], self.workdir, self.rig_git_dir, stdin=info)


def stage(workdir: Path, rig_git_dir: Path) -> None:
    """Stage a workspace the rig did not copy itself (a Stager fed by one walk that follows no link)."""
    with Stager(workdir, rig_git_dir) as stager:
        root = str(workdir)
        for rel, st in walk(workdir, skip=_staged):
            path = os.path.join(root, rel)
            if stat.S_ISLNK(st.st_mode):
                stager.link(rel, os.readlink(path))
            elif stat.S_ISREG(st.st_mode) and st.st_size > Stager.max_bytes:
                stager.file(rel, st.st_mode, None, st.st_size)
            elif stat.S_ISREG(st.st_mode) and (data := read_bounded(path, st.st_size)) is not None:
                stager.file(rel, st.st_mode, data, st.st_size)
        stager.finish()


def collect_diff(
    workdir: Path, rig_git_dir: Path, baseline: str, *, staged: bool = False
) -> tuple[str, list[str]]:
    """(binary diff against the baseline, changed paths with their status letter).

    `git apply` of the diff onto the baseline reproduces the workspace byte for byte, whatever the
    agent wrote: any file name (git quotes it in the patch), binary files as binary patches, and
    files that are not valid UTF-8 as binary patches too, so the diff is always valid UTF-8 text.
    The one exception is a symlink whose target is not UTF-8 (git has no binary form for a link):
    it is left out of the patch, which says so in a "# rig:" line before the first file.
    Each changed path is "<status> <path>", the path quoted as `quote_path` does when needed.
    `staged`: the index already holds the workspace (a Stager fed while copying it); otherwise
    it is staged here.
    """
    _set_attributes(rig_git_dir, NEUTRAL_ATTRIBUTES)
    if not staged:
        stage(workdir, rig_git_dir)
    changes = _raw_changes(workdir, rig_git_dir, baseline)
    changed = [f"{c.status} {quote_path(c.path)}" for c in changes]
    diff = git_bytes(["diff", "--cached", *DIFF_FLAGS, baseline], workdir, rig_git_dir)
    try:
        return diff.decode("utf-8"), changed
    except UnicodeDecodeError:
        pass
    # Some text diff is not UTF-8: diff those files as binary, the others as text.
    bad = _not_utf8_blobs(workdir, rig_git_dir, changes)
    binary, noted, notes = [], [], []
    for c in changes:
        if c.old not in bad and c.new not in bad:
            continue
        if (c.old_mode == _SYMLINK and c.old in bad) or (c.new_mode == _SYMLINK and c.new in bad):
            noted.append(c.path)
            note = f"# rig: not in this patch: {quote_path(c.path)}, a symlink whose target is not UTF-8\n"
            notes.append(note.encode())
        else:
            binary.append(c.path)
    _set_attributes(rig_git_dir, BINARY_ATTRIBUTES)
    try:
        binary_diff, noted_diff = (
            b"".join(
                git_bytes(["diff", "--cached", *DIFF_FLAGS, baseline, "--", *chunk], workdir, rig_git_dir)
                for chunk in _pathspec_chunks(paths)
            )
            for paths in (binary, noted)
        )
    finally:
        _set_attributes(rig_git_dir, NEUTRAL_ATTRIBUTES)
    # The text diff of everything else is the full diff without those files' sections: git names a
    # file the same way in both diffs, so its "diff --git" line identifies its sections.
    dropped = {_header(s) for s in (*_sections(binary_diff), *_sections(noted_diff))}
    text = [s for s in _sections(diff) if _header(s) not in dropped]
    try:
        return b"".join([*notes, *text, binary_diff]).decode("utf-8"), changed
    except UnicodeDecodeError as exc:
        raise WorkspaceError(
            f"diff of {workdir} is not valid UTF-8 even with binary patches ({exc}); report this as a rig bug"
        ) from None


def _sections(diff: bytes) -> list[bytes]:
    """A diff cut into its files' sections, each from its "diff --git" line.

    No line inside a section can start that way: content lines start with a space, + or -, and
    binary patch lines are base85, which has no space.
    """
    starts = [m.start() for m in re.finditer(rb"^diff --git ", diff, re.MULTILINE)]
    return [diff[a:b] for a, b in zip(starts, [*starts[1:], len(diff)][: len(starts)], strict=True)]


def _header(section: bytes) -> bytes:
    return section.split(b"\n", 1)[0]


def changed_texts(
    workdir: Path, rig_git_dir: Path, baseline: str, want: Callable[[str], bool]
) -> list[tuple[str, str, str]]:
    """(path, baseline text, current text) of every added or modified regular file `want` names.

    Read from the files themselves, not from git's rendering of them (attributes, encodings and
    binary patches cannot hide a line); decoded leniently, at most TEXT_MAX_BYTES of each. Call
    after collect_diff, which stages the workspace.
    """
    texts = []
    for change in _raw_changes(workdir, rig_git_dir, baseline):
        rel = os.fsdecode(change.path)
        if change.status not in ("A", "M") or change.new_mode not in _REGULAR or not want(rel):
            continue
        data = read_bounded(workdir / rel, TEXT_MAX_BYTES)
        if data is None:
            continue
        current = data.decode("utf-8", errors="replace")
        before = ""
        if change.old != _ZERO_OID and change.old_mode in _REGULAR:
            blob = git_bytes(["cat-file", "blob", change.old.decode()], workdir, rig_git_dir)
            before = blob[:TEXT_MAX_BYTES].decode("utf-8", errors="replace")
        texts.append((rel, before, current))
    return texts
