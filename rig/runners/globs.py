"""Test-file globs, as pack.toml's `[runner] test_files` and `rig task mine --tests` write them.

A glob is matched against a file's whole path relative to the fixture root, in the dialect the
node runners' configurations use (micromatch, minimatch, picomatch), so a project's globs can be
copied as they are: `*` and `?` stay within a folder, `**` as a whole path segment spans any number
of folders (none included), `[...]` is a character class, `{a,b}` an alternation, and `?(a|b)`,
`*(a|b)`, `+(a|b)`, `@(a|b)` are extended globs. A glob that starts with `!` excludes what it
matches. Syntax a glob cannot hold (an unclosed bracket or brace) is taken literally.
"""

import re
from dataclasses import dataclass
from functools import lru_cache

_SEGMENT = "[^/]"
_EXTGLOB = {"?": "?", "*": "*", "+": "+", "@": ""}
NEGATE = "!"


class _Translator:
    """One glob as a regular expression, by recursive descent over its characters."""

    def __init__(self, glob: str) -> None:
        self.glob = glob
        self.at = 0

    def sequence(self, stops: str) -> str:
        """The regex of the glob from here up to (not including) the first of `stops` at this level."""
        out: list[str] = []
        glob = self.glob
        while self.at < len(glob) and glob[self.at] not in stops:
            out.append(self.item())
        return "".join(out)

    def item(self) -> str:
        glob, at = self.glob, self.at
        char = glob[at]
        segment_start = at == 0 or glob[at - 1] == "/"
        if glob.startswith("**", at) and segment_start and glob[at + 2 : at + 3] in ("/", ""):
            self.at += 3
            # `a/**` holds everything below a; `**/b` is b in any folder, the root included.
            return ".*" if at + 2 == len(glob) else f"(?:{_SEGMENT}+/)*"
        if char in _EXTGLOB and glob[at + 1 : at + 2] == "(":
            alternatives = self.group(at + 2, "|", ")")
            if alternatives is not None:
                return f"(?:{alternatives}){_EXTGLOB[char]}"
        if char == "*":
            self.at += 1
            return f"{_SEGMENT}*"
        if char == "?":
            self.at += 1
            return _SEGMENT
        if char == "[":
            return self.bracket()
        if char == "{":
            alternatives = self.group(at + 1, ",", "}")
            if alternatives is not None:
                return f"(?:{alternatives})"
        if char == "\\" and at + 1 < len(glob):
            self.at += 2
            return re.escape(glob[at + 1])
        self.at += 1
        return re.escape(char)

    def group(self, start: int, separator: str, close: str) -> str | None:
        """`a|b)` or `a,b}` from `start` as regex alternatives; None (nothing consumed) when the
        group is not closed, so its opening is taken literally."""
        saved, self.at = self.at, start
        alternatives = [self.sequence(separator + close)]
        while self.at < len(self.glob) and self.glob[self.at] == separator:
            self.at += 1
            alternatives.append(self.sequence(separator + close))
        if self.at >= len(self.glob):
            self.at = saved
            return None
        self.at += 1
        return "|".join(alternatives)

    def bracket(self) -> str:
        glob, start = self.glob, self.at + 1
        negated = glob[start : start + 1] in ("!", "^")
        first = start + 1 if negated else start
        # A `]` right after the opening is a member, as in every glob dialect.
        end = glob.find("]", first + 1)
        if end < 0:
            self.at += 1
            return re.escape("[")
        members = glob[first:end].replace("\\", "\\\\").replace("^", "\\^").replace("[", "\\[")
        self.at = end + 1
        return f"[^/{members}]" if negated else f"[{members}]"


@lru_cache(maxsize=256)
def compile_glob(glob: str) -> re.Pattern[str]:
    """The regular expression that matches the paths `glob` matches (without a leading `!`)."""
    translator = _Translator(glob.removeprefix("./"))
    return re.compile(translator.sequence(""))


@dataclass(frozen=True)
class GlobSet:
    """Which paths a list of globs takes: those matching a glob and no `!` glob."""

    include: tuple[re.Pattern[str], ...]
    exclude: tuple[re.Pattern[str], ...]

    def matches(self, path: str) -> bool:
        """Whether the fixture-relative posix `path` is taken."""
        return any(p.fullmatch(path) for p in self.include) and not any(
            p.fullmatch(path) for p in self.exclude
        )


@lru_cache(maxsize=64)
def glob_set(globs: tuple[str, ...]) -> GlobSet:
    """The matcher of `globs` (each valid as rig.schema.test_glob_problem checks)."""
    include = tuple(compile_glob(g) for g in globs if not g.startswith(NEGATE))
    exclude = tuple(compile_glob(g[1:]) for g in globs if g.startswith(NEGATE))
    return GlobSet(include, exclude)
