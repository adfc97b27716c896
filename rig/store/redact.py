"""Redaction: nothing rig saves may reveal the machine or the person who ran it.

Paths (the runs directory, the repository, the home directory) become `<RUNS>`, `<REPO>` and
`<HOME>`; the user name and host name become `<user>` and `<host>` wherever they stand as a word.
The same replacements apply to text and to the bytes of binary files, and applying them twice
changes nothing.
"""

import getpass
import os
import re
import socket
import stat
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rig.confine.untrusted import read_bounded, walk

MAX_FILE_BYTES = 256 * 1024 * 1024
PLACEHOLDERS = ("<RUNS>", "<VERIFY>", "<REPO>", "<HOME>", "<user>", "<host>")

# A path or name continues while these characters follow, so "/home/al" must not eat "/home/alice"
# and "root" must not eat "rootdir". A trailing "." is allowed so "as root." is still redacted.
_AFTER = "(?![A-Za-z0-9_-])"
# A name preceded by these is the tail of a longer word, a dotted name or a file name.
_BEFORE = "(?<![A-Za-z0-9_.-])"
_WORD_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-"
_WORD_BYTES = _WORD_CHARS.encode("ascii")


def _continues_path(s: str | bytes, start: int) -> bool:
    """True if the match at `start` is the tail of a longer absolute path.

    With home = /root, "/home/root/x" must not become "/home<HOME>/x" (the user-name rule redacts it
    properly), while "-I/root/include" must still lose its home: only a "/" before the word that
    touches the match marks a longer path.
    """
    i = start
    chars, slash = (_WORD_CHARS, "/") if isinstance(s, str) else (_WORD_BYTES, b"/")
    while i > 0 and s[i - 1 : i] in chars:
        i -= 1
    return 0 < i < start and s[i - 1 : i] == slash


def _path_variants(path: Path) -> list[str]:
    """The absolute spelling of `path` and its resolved form, skipping ones that would match everything."""
    variants = []
    for spelled in (os.path.abspath(path), os.path.realpath(path)):
        if spelled not in ("", "/", ".") and spelled not in variants:
            variants.append(spelled)
    return variants


def _dashed(path: str) -> str:
    """`path` as tools spell it in a folder name: every character but letters and digits a "-"."""
    return re.sub(r"[^A-Za-z0-9]", "-", path)


def _build(
    paths: Iterable[tuple[str, str]], names: Iterable[tuple[str, str, bool]], as_bytes: bool
) -> tuple[re.Pattern[Any] | None, re.Pattern[Any]]:
    """Compile the path pattern and the name pattern, as str or bytes patterns."""

    def enc(s: str) -> Any:
        return s.encode("utf-8") if as_bytes else s

    # Longest first: Python's alternation takes the first alternative that matches, so runs_root
    # (often inside home) wins over home.
    ordered = sorted({p for p, _ in paths}, key=lambda p: (-len(p), p))
    path_re = None
    if ordered:
        spelled = "|".join(re.escape(p) for p in ordered if not p.startswith("-"))
        # A dashed path goes on with a "-" before the next name, as a path does with a "/".
        dashed = "|".join(re.escape(p) for p in ordered if p.startswith("-"))
        pattern = f"(?:{spelled}){_AFTER}" + (f"|(?:{dashed})(?![A-Za-z0-9_])" if dashed else "")
        path_re = re.compile(enc(pattern))
    # Placeholders match first and are put back unchanged, so a user named "user" or "HOME" never
    # turns "<user>" into "<<user>>": this is what makes redaction idempotent.
    parts = ["(?P<keep>" + "|".join(re.escape(p) for p in PLACEHOLDERS) + ")"]
    for i, (name, _placeholder, ignore_case) in enumerate(names):
        body = re.escape(name)
        if ignore_case:
            body = f"(?i:{body})"
        parts.append(f"{_BEFORE}(?P<n{i}>{body}){_AFTER}")
    return path_re, re.compile(enc("|".join(parts)))


@dataclass(frozen=True)
class Redactor:
    """Replaces machine paths and personal names with fixed placeholders.

    `paths` holds (path, placeholder) pairs; `names` holds (name, placeholder, ignore_case) triples.
    Build one with `Redactor.for_machine`.
    """

    paths: tuple[tuple[str, str], ...] = ()
    names: tuple[tuple[str, str, bool], ...] = ()
    _path_map: dict[str, str] = field(init=False, repr=False, compare=False)
    _str_res: tuple[re.Pattern[str] | None, re.Pattern[str]] = field(init=False, repr=False, compare=False)
    _bytes_res: tuple[re.Pattern[bytes] | None, re.Pattern[bytes]] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        # Longest first, so "host.example.org" is replaced whole before its short form "host" could
        # match and leave ".example.org" behind.
        names = tuple(sorted((tuple(n) for n in self.names if n[0]), key=lambda n: -len(n[0])))
        object.__setattr__(self, "names", names)
        path_map: dict[str, str] = {}
        for path, placeholder in self.paths:
            path_map.setdefault(path, placeholder)
        object.__setattr__(self, "_path_map", path_map)
        object.__setattr__(self, "_str_res", _build(self.paths, names, as_bytes=False))
        object.__setattr__(self, "_bytes_res", _build(self.paths, names, as_bytes=True))

    @classmethod
    def for_machine(
        cls,
        runs_root: Path,
        repo_root: Path,
        home: Path | None = None,
        user: str | None = None,
        host: str | None = None,
        results_root: Path | None = None,
        verify_root: Path | None = None,
    ) -> "Redactor":
        """A redactor for this machine: its runs directory, the directory of its verification
        copies, repository, home, user and host names.

        Missing values default to Path.home() ($HOME), getpass.getuser() ($USER/$LOGNAME) and
        socket.gethostname(); the short host name (before the first dot) is redacted as well.
        """
        if home is None:
            try:
                home = Path.home()
            except RuntimeError:
                home = None
        if user is None:
            try:
                user = getpass.getuser()
            except (OSError, KeyError):
                user = ""
        if host is None:
            host = socket.gethostname()
        paths: list[tuple[str, str]] = []
        roots = (
            (results_root, "<RESULTS>"),
            (runs_root, "<RUNS>"),
            (verify_root, "<VERIFY>"),
            (repo_root, "<REPO>"),
            (home, "<HOME>"),
        )
        for root, placeholder in roots:
            if root is not None:
                paths.extend((variant, placeholder) for variant in _path_variants(Path(root)))
        # Tools name folders after a path with every other character made a "-" (Claude Code's
        # projects/-home-alice--cache-rig-runs-...): the user name would stand there unredacted.
        # A one-name path ("/root") dashed is too common a word to replace.
        paths.extend((_dashed(path), placeholder) for path, placeholder in list(paths) if path.count("/") > 1)
        names: list[tuple[str, str, bool]] = [(user, "<user>", False)]
        hosts = [host]
        short = host.split(".", 1)[0]
        if short != host:
            hosts.append(short)
        # Host names are case-insensitive and tools print them in either case.
        names.extend((h, "<host>", True) for h in hosts)
        return cls(paths=tuple(paths), names=tuple(names))

    def _path_repl(self, m: re.Match[Any]) -> Any:
        matched = m.group(0)
        if _continues_path(m.string, m.start()):
            return matched
        if isinstance(matched, bytes):
            return self._path_map[matched.decode("utf-8")].encode("utf-8")
        return self._path_map[matched]

    def _name_repl(self, m: re.Match[Any]) -> Any:
        if m.group("keep") is not None:
            return m.group(0)
        group = m.lastgroup
        assert group is not None and group.startswith("n")
        placeholder = self.names[int(group[1:])][1]
        return placeholder.encode("utf-8") if isinstance(m.group(0), bytes) else placeholder

    def text(self, s: str) -> str:
        """`s` with every machine path and personal name replaced by its placeholder."""
        path_re, name_re = self._str_res
        if path_re is not None:
            s = path_re.sub(self._path_repl, s)
        return name_re.sub(self._name_repl, s)

    def data(self, b: bytes) -> bytes:
        """The same replacements as `text`, on raw bytes (paths embedded in binary files)."""
        path_re, name_re = self._bytes_res
        if path_re is not None:
            b = path_re.sub(self._path_repl, b)
        return name_re.sub(self._name_repl, b)

    def value(self, obj: Any) -> Any:
        """`obj` with every str inside dicts, lists and tuples redacted; dict keys are left alone."""
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, dict):
            return {k: self.value(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self.value(v) for v in obj]
        if isinstance(obj, tuple):
            items = [self.value(v) for v in obj]
            return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
        return obj

    def file(self, path: Path) -> bool:
        """Redact one regular file in place (text or binary); True if its content changed.

        Symlinks and files over 256 MiB are left alone. The rewrite is atomic and keeps the mode
        and timestamps, so the file still reads as the evidence it was.
        """
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_BYTES:
            return False
        raw = read_bounded(Path(path), st.st_size)
        if raw is None:
            return False
        try:
            new = self.text(raw.decode("utf-8")).encode("utf-8")
        except UnicodeDecodeError:
            new = self.data(raw)
        if new == raw:
            return False
        fd, tmp_name = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".redact.")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(new)
            os.chmod(tmp_name, stat.S_IMODE(st.st_mode))
            os.utime(tmp_name, ns=(st.st_atime_ns, st.st_mtime_ns))
            os.replace(tmp_name, path)
        except BaseException:
            Path(tmp_name).unlink(missing_ok=True)
            raise
        return True

    def _link(self, path: Path) -> bool:
        """Re-point a symlink whose target reveals a path; the saved link may dangle, the secret may not."""
        target = os.readlink(path)
        new = self.text(target)
        if new == target:
            return False
        # A short name: the link's own name may already be as long as a file name can be.
        tmp = path.with_name(f".redact.{os.getpid()}.{threading.get_ident()}")
        tmp.unlink(missing_ok=True)
        os.symlink(new, tmp)
        os.replace(tmp, path)
        return True

    def tree(self, root: Path) -> int:
        """Redact every regular file below `root` without following symlinks; returns files changed.

        Symlink targets that reveal a path are rewritten too (and counted).
        """
        changed = 0
        # The agent's home lies below the attempt folder: its tree is hostile (walk never recurses).
        for rel, st in walk(root, skip=(), dirs=True):
            if stat.S_ISLNK(st.st_mode):
                changed += self._link(root / rel)
            elif stat.S_ISREG(st.st_mode) and self.file(root / rel):
                changed += 1
        return changed
