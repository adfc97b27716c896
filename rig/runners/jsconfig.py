"""What a node test runner's configuration says, read without running anything: the literal values
of a key in a JavaScript, TypeScript or JSON(C) config file, and the arguments a package.json
script gives a program.

The reading is tolerant. A file is a stream of tokens (comments, strings, template literals and
regular expressions recognised, so that none of them unbalances a bracket); a key is any `key:` in
an object literal, wherever it sits (`defineConfig({...})`, `module.exports = {...}`, `const config:
Config = {...}`), and its value is parsed where it is a literal: a string, an array, an object, true
or false. Anything else (a variable, a call, a condition, a template with `${}`, a spread) is
COMPUTED: what it holds is only known by running the file, which `rig pack new` never does.
"""

import re
import shlex
from dataclasses import dataclass

_NAME = re.compile(r"[A-Za-z_$][\w$]*")
_NUMBER = re.compile(r"\d[\w.]*|\.\d[\w.]*")
# After these a `/` starts a regular expression, not a division.
_BEFORE_REGEX_PUNCT = frozenset("(,=:[!&|?{};+-*%<>~^")
_BEFORE_REGEX_WORDS = frozenset(
    {"return", "typeof", "case", "do", "else", "in", "of", "new", "delete", "void"}
)
_CLOSERS = frozenset(",;}])")
_OPENERS = {"(": ")", "[": "]", "{": "}"}
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "v": "\v", "0": "\0"}
# Words that end a value's type annotation: `[...] as const`, `{...} satisfies Config`.
_ANNOTATIONS = frozenset({"as", "satisfies"})
# Shell operators between the commands of a package.json script.
_SCRIPT_SEPARATORS = re.compile(r"&&|\|\||[;|&]")


class _Computed:
    """A value that only running the configuration would give."""

    def __repr__(self) -> str:
        return "COMPUTED"


COMPUTED = _Computed()


@dataclass(frozen=True)
class _Token:
    kind: str
    """str (a string literal or a template without `${}`), name, number, regex, punct or computed."""
    text: str


def _string(text: str, at: int) -> tuple[str, int]:
    """The string literal opening at `at`, unescaped, and where it ends."""
    quote, out, i = text[at], [], at + 1
    while i < len(text) and text[i] != quote and text[i] != "\n":
        char = text[i]
        if char == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt in "ux":
                width = 4 if nxt == "u" else 2
                digits = text[i + 2 : i + 2 + width]
                if re.fullmatch(r"[0-9A-Fa-f]+", digits) and len(digits) == width:
                    out.append(chr(int(digits, 16)))
                    i += 2 + width
                    continue
            if nxt != "\n":
                out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(char)
        i += 1
    return "".join(out), i + 1


def _template(text: str, at: int) -> tuple[_Token, int]:
    """The template literal opening at `at` (a string unless it holds `${}`) and where it ends."""
    i, depth, computed, out = at + 1, 0, False, []
    while i < len(text):
        char = text[i]
        if char == "\\":
            out.append(text[i + 1 : i + 2])
            i += 2
            continue
        if depth == 0 and char == "`":
            break
        if depth == 0 and text.startswith("${", i):
            computed, depth, i = True, 1, i + 2
            continue
        if depth:
            depth += {"{": 1, "}": -1}.get(char, 0)
        else:
            out.append(char)
        i += 1
    token = _Token("computed", "") if computed else _Token("str", "".join(out))
    return token, i + 1


def _regex_end(text: str, at: int) -> int | None:
    """Where the regular expression literal opening at `at` ends (its flags included); None if the
    line ends first (a division after all)."""
    i, in_class = at + 1, False
    while i < len(text) and text[i] != "\n":
        char = text[i]
        if char == "\\":
            i += 2
            continue
        if char == "[":
            in_class = True
        elif char == "]":
            in_class = False
        elif char == "/" and not in_class:
            flags = _NAME.match(text, i + 1)
            return flags.end() if flags else i + 1
        i += 1
    return None


def _regex_may_start(tokens: list[_Token]) -> bool:
    if not tokens:
        return True
    last = tokens[-1]
    return (last.kind == "punct" and last.text in _BEFORE_REGEX_PUNCT) or (
        last.kind == "name" and last.text in _BEFORE_REGEX_WORDS
    )


def tokens(text: str) -> list[_Token]:
    """The tokens of JavaScript, TypeScript or JSON(C) source, comments left out."""
    out: list[_Token] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char.isspace():
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = len(text) if end < 0 else end + 2
        elif char in "'\"":
            value, i = _string(text, i)
            out.append(_Token("str", value))
        elif char == "`":
            token, i = _template(text, i)
            out.append(token)
        elif char == "/" and _regex_may_start(out) and (end := _regex_end(text, i)) is not None:
            out.append(_Token("regex", text[i:end]))
            i = end
        elif (name := _NAME.match(text, i)) is not None:
            out.append(_Token("name", name.group()))
            i = name.end()
        elif (number := _NUMBER.match(text, i)) is not None:
            out.append(_Token("number", number.group()))
            i = number.end()
        elif text.startswith("...", i):
            out.append(_Token("punct", "..."))
            i += 3
        else:
            out.append(_Token("punct", char))
            i += 1
    return out


class _Parser:
    """Literal values over a token list; every method takes and returns a token index."""

    def __init__(self, toks: list[_Token]) -> None:
        self.toks = toks

    def punct(self, at: int, char: str) -> bool:
        return at < len(self.toks) and self.toks[at].kind == "punct" and self.toks[at].text == char

    def skip(self, at: int) -> int:
        """Past an expression: to the next `,`, `;` or closing bracket outside brackets."""
        depth = 0
        while at < len(self.toks):
            token = self.toks[at]
            if token.kind == "punct":
                if depth == 0 and token.text in _CLOSERS:
                    return at
                if token.text in _OPENERS:
                    depth += 1
                elif token.text in _CLOSERS and token.text not in ",;":
                    depth -= 1
            at += 1
        return at

    def value(self, at: int) -> tuple[object, int]:
        """The value starting at `at`: a literal, or COMPUTED; and where it ends."""
        if at >= len(self.toks):
            return COMPUTED, at
        token = self.toks[at]
        value: object
        if self.punct(at, "{"):
            value, at = self.object(at + 1)
        elif self.punct(at, "["):
            value, at = self.array(at + 1)
        elif token.kind == "str":
            value, at = token.text, at + 1
        elif token.kind == "name" and token.text in ("true", "false"):
            value, at = token.text == "true", at + 1
        else:
            return COMPUTED, self.skip(at)
        if at < len(self.toks) and self.toks[at].kind == "name" and self.toks[at].text in _ANNOTATIONS:
            return value, self.skip(at)
        if at < len(self.toks) and not (self.toks[at].kind == "punct" and self.toks[at].text in _CLOSERS):
            # `[...].concat(x)`, `"a" + b`: the literal is only part of an expression.
            return COMPUTED, self.skip(at)
        return value, at

    def object(self, at: int) -> tuple[dict[str, object], int]:
        """An object literal's keys and values, from just after its `{` to just after its `}`."""
        out: dict[str, object] = {}
        while at < len(self.toks) and not self.punct(at, "}"):
            start = at
            token = self.toks[at]
            if token.kind in ("name", "str", "number") and self.punct(at + 1, ":"):
                out[token.text], at = self.value(at + 2)
            else:
                # A spread, a method, a computed key or a shorthand: nothing literal to read.
                at = self.skip(at + 1 if self.punct(at, "...") else at)
            if self.punct(at, ","):
                at += 1
            if at == start:
                at += 1
        return out, at + 1

    def array(self, at: int) -> tuple[list[object], int]:
        """An array literal's items (a spread is one COMPUTED item), to just after its `]`."""
        out: list[object] = []
        while at < len(self.toks) and not self.punct(at, "]"):
            start = at
            if self.punct(at, "..."):
                out.append(COMPUTED)
                at = self.skip(at + 1)
            elif not self.punct(at, ","):
                item, at = self.value(at)
                out.append(item)
            if self.punct(at, ","):
                at += 1
            if at == start:
                at += 1
        return out, at + 1


def values_of(text: str, key: str) -> list[object]:
    """Every value written for `key` as an object literal's key in the source `text`, in order:
    each a str, bool, list, dict (of such values) or COMPUTED."""
    toks = tokens(text)
    parser = _Parser(toks)
    found = []
    for at, token in enumerate(toks):
        if (
            token.kind in ("name", "str")
            and token.text == key
            and parser.punct(at + 1, ":")
            and at > 0
            and toks[at - 1].kind == "punct"
            and toks[at - 1].text in "{,"
        ):
            found.append(parser.value(at + 2)[0])
    return found


def strings(value: object) -> list[str] | None:
    """A value that is a string or a list of strings, as a list; None for anything else (COMPUTED,
    or a list with a computed item)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return list(value)
    return None


def string_items(value: object) -> list[str]:
    """The strings a value holds (itself, or a list's string items), computed items left out."""
    items = value if isinstance(value, list) else [value]
    return [item for item in items if isinstance(item, str)]


def invocation(script: str, program: str) -> list[str] | None:
    """The arguments after `program` in the first command of a package.json script that runs it
    (`nyc mocha --require x test/` gives `--require x test/`); None if no command runs it."""
    for command in _SCRIPT_SEPARATORS.split(script):
        try:
            words = shlex.split(command)
        except ValueError:
            continue
        for at, word in enumerate(words):
            if word.rsplit("/", 1)[-1] == program:
                return words[at + 1 :]
    return None


def option_values(args: list[str], names: tuple[str, ...]) -> list[str]:
    """The values given to the options `names` (`--config x`, `--config=x`, `-c x`) in `args`."""
    out = []
    for at, arg in enumerate(args):
        name, joined, value = arg.partition("=")
        if name in names:
            if joined:
                out.append(value)
            elif at + 1 < len(args):
                out.append(args[at + 1])
    return out
