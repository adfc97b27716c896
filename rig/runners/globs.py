"""Test-file globs, as pack.toml's `[runner] test_files` and `rig task mine --tests` write them.

A glob is matched against a file's whole path relative to the fixture root, in the dialect the
node runners' configurations use (micromatch, minimatch, picomatch), so a project's globs can be
copied as they are: `*` and `?` stay within a folder, `**` as a whole path segment spans any number
of folders (none included), `[...]` is a character class, `{a,b}` an alternation, and `?(a|b)`,
`*(a|b)`, `+(a|b)`, `@(a|b)` are extended globs. A glob that starts with `!` excludes what it
matches. Syntax a glob cannot hold (an unclosed bracket or brace) is taken literally.

The other way, a regular expression over paths (jest's testRegex) becomes globs where globs can
say what it matches (`regex_globs`).
"""

import re
from dataclasses import dataclass
from functools import lru_cache

_SEGMENT = "[^/]"
_EXTGLOB = {"?": "?", "*": "*", "+": "+", "@": ""}
NEGATE = "!"
# A path regex as globs: what each regex class escape is as a glob class.
_REGEX_CLASSES = {"d": "[0-9]", "w": "[a-zA-Z0-9_]"}
_GLOB_SPECIAL = frozenset("*?[]{}()!+@\\")
_MAX_REGEX_GLOBS = 8


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


class _NotGlob(Exception):
    """A regular expression that says more than globs can."""


class _Regex:
    """A regular expression as nodes: (lit, char), (any,), (class, glob class), (star,) for `.*` or
    `.+`, (group, alternatives), (opt, node); _NotGlob for anything else."""

    def __init__(self, text: str) -> None:
        self.text, self.at = text, 0

    def alternatives(self) -> list[list[tuple]]:
        alternatives = [self.sequence()]
        while self.text[self.at : self.at + 1] == "|":
            self.at += 1
            alternatives.append(self.sequence())
        return alternatives

    def sequence(self) -> list[tuple]:
        nodes = []
        while self.at < len(self.text) and self.text[self.at] not in "|)":
            nodes.append(self.quantified(self.atom()))
        return nodes

    def atom(self) -> tuple:
        text = self.text
        char = text[self.at]
        self.at += 1
        if char == "(":
            if text.startswith("?:", self.at):
                self.at += 2
            elif text.startswith("?", self.at):
                raise _NotGlob
            alternatives = self.alternatives()
            if text[self.at : self.at + 1] != ")":
                raise _NotGlob
            self.at += 1
            return ("group", alternatives)
        if char == "[":
            end = text.find("]", self.at + 1)
            body = text[self.at : end]
            if end < 0 or "/" in body or "\\" in body:
                raise _NotGlob
            self.at = end + 1
            return ("class", f"[!{body[1:]}]" if body.startswith("^") else f"[{body}]")
        if char == "\\" and self.at < len(text):
            escaped = text[self.at]
            self.at += 1
            if escaped in _REGEX_CLASSES:
                return ("class", _REGEX_CLASSES[escaped])
            if escaped.isalnum():
                raise _NotGlob
            return ("lit", escaped)
        if char == ".":
            return ("any",)
        if char in "^$*+?{}\\":
            raise _NotGlob
        return ("lit", char)

    def quantified(self, node: tuple) -> tuple:
        quantifier = self.text[self.at : self.at + 1]
        if quantifier not in ("?", "*", "+", "{"):
            return node
        self.at += 1
        if self.text[self.at : self.at + 1] == "?":  # lazy: as globs, the same
            self.at += 1
        if quantifier == "?":
            return ("opt", node)
        if quantifier in "*+" and node == ("any",):
            return ("star",)
        raise _NotGlob


def _render(nodes: list[tuple], prefixes: list[str]) -> list[str]:
    """Each glob so far (`prefixes`) continued by `nodes`."""
    for node in nodes:
        prefixes = _render_node(node, prefixes)
        if len(prefixes) > _MAX_REGEX_GLOBS:
            raise _NotGlob
    return prefixes


def _render_node(node: tuple, prefixes: list[str]) -> list[str]:
    kind = node[0]
    if kind == "lit":
        return [p + ("\\" if node[1] in _GLOB_SPECIAL else "") + node[1] for p in prefixes]
    if kind in ("any", "class"):
        return [p + ("?" if kind == "any" else node[1]) for p in prefixes]
    if kind == "star":
        # `.*` crosses folders: a glob says so only from the start of a folder's name.
        if any(p and not p.endswith("/") for p in prefixes):
            raise _NotGlob
        return [p + "**/*" for p in prefixes]
    alternatives = node[1] if kind == "group" else [[node[1]]]
    alone = [piece for alternative in alternatives for piece in _render(alternative, [""])]
    if all("/" not in piece for piece in alone):
        if kind == "group" and len(alone) == 1:
            return [p + alone[0] for p in prefixes]
        piece = ("?" if kind == "opt" else "@") + "(" + "|".join(alone) + ")"
        return [p + piece for p in prefixes]
    # Alternatives that cross folders: a glob each.
    out = [glob for alternative in alternatives for glob in _render(alternative, prefixes)]
    return (prefixes if kind == "opt" else []) + out


def regex_globs(regex: str) -> list[str] | None:
    """The globs matching the paths that `regex` matches somewhere in them (as jest's testRegex
    searches a file's absolute path), for a regex made of literals, `.`, `.*`, classes, groups of
    alternatives and `?`, ending in `$`; None for any other, which no glob says."""
    body = regex.removeprefix("^") if regex.startswith(("^.*", "^.+")) else regex
    if not body.endswith("$") or body.endswith("\\$"):
        return None
    parser = _Regex(body[:-1])
    try:
        alternatives = parser.alternatives()
        if parser.at != len(parser.text):
            return None
        globs = [glob for alternative in alternatives for glob in _render(alternative, [""])]
    except _NotGlob:
        return None
    # The regex may match from anywhere in the path: from a folder, or within a name.
    return [
        glob if glob.startswith("**/") else f"**{glob}" if glob.startswith("/") else f"**/*{glob}"
        for glob in globs
    ]
