"""A mined task's prompt: the fix commit's message as an issue, never naming the files or tests.

The agent must find the change from a description of the problem, as it would from an issue. A
commit message often names what it changed (`fix paginate() in app/pagination.py`, `add
test_last_page`): those names are replaced by neutral words, and what is left is put into a
template the user can edit (`$title`, `$details`).
"""

import re
from pathlib import PurePosixPath
from string import Template

DEFAULT_TEMPLATE = """$title

$details

Change the project's code so that it behaves as described. The project's own checks must still pass.
"""
# Conventional-commit and tracker prefixes: `fix(api)!: `, `[bugfix] `, `BUG-12: `.
PREFIX = re.compile(r"^(?:\[[^\]]*\]\s*|[a-z]+(?:\([^)]*\))?!?:\s+|[A-Z]+-\d+:?\s+)+")
# Trailers such as Signed-off-by: and Co-authored-by:, and a bare "Fixes #12".
TRAILER = re.compile(r"^(?:[A-Za-z][A-Za-z-]*-by|Change-Id|Refs?|Fixes|Closes|Resolves)\b[:\s#]")
FILE_WORDS = "the code"
TEST_WORDS = "a test"
# A title needs this many words once names are gone to say what the problem is.
MIN_TITLE_WORDS = 2


def _names_pattern(names: set[str]) -> re.Pattern[str] | None:
    names = {n for n in names if n}
    if not names:
        return None
    # Longest first, so `app/pagination.py` goes before `pagination.py`, and whole words only.
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    return re.compile(rf"(?<![\w./-])`?(?:{alternatives})`?(?:\(\))?(?![\w-])")


def scrub(
    text: str, files: list[str], tests: list[str], words: tuple[str, str] = (FILE_WORDS, TEST_WORDS)
) -> str:
    """`text` with every changed file (path or name) and every test (file, module or function)
    replaced by a neutral phrase (`words`: for a file, for a test)."""
    file_names: set[str] = set()
    for path in files:
        file_names |= {path, PurePosixPath(path).name}
    test_names: set[str] = set()
    for test in tests:
        module, _, name = test.rpartition("::")
        test_names |= {name, module, name.rsplit(".", 1)[-1]}
    for names, phrase in ((test_names, words[1]), (file_names, words[0])):
        pattern = _names_pattern(names)
        if pattern is not None:
            text = pattern.sub(phrase, text)
    return text


def issue_text(subject: str, body: str, files: list[str], tests: list[str], template: str) -> str | None:
    """The prompt made from a commit message, or None when the message says too little once the
    names of files and tests are gone."""
    subject = PREFIX.sub("", subject.strip())
    if len(scrub(subject, files, tests, ("", "")).split()) < MIN_TITLE_WORDS:
        return None
    title = scrub(subject, files, tests).strip().rstrip(".")
    lines = body.strip().splitlines()
    while lines and (TRAILER.match(lines[-1].strip()) or not lines[-1].strip()):
        lines.pop()
    details = scrub("\n".join(lines).strip(), files, tests)
    text = Template(template).safe_substitute(title=title[0].upper() + title[1:] + ".", details=details)
    # An empty $details leaves a gap of blank lines behind.
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"
