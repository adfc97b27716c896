"""The documentation stays true: generated pages current, relative links resolving, the README
short, every page of docs/ listed in docs/index.md."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
README_MAX_LINES = 250

# [text](target) or [text](target "title"); images ![alt](target) too. Not inside code spans.
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.DOTALL | re.MULTILINE)
CODE_SPAN = re.compile(r"`[^`\n]*`")


def markdown_files() -> list[Path]:
    return [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]


def relative_links(text: str) -> list[str]:
    """The link targets of Markdown `text` that point at files: no URL scheme, not a pure anchor;
    code blocks and code spans are not links."""
    text = CODE_SPAN.sub("", FENCE.sub("", text))
    targets = []
    for target in LINK.findall(text):
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("#"):
            continue  # http(s), mailto and other schemes; anchors within the page
        targets.append(target)
    return targets


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in relative_links(path.read_text(encoding="utf-8")):
        file_part = target.split("#", 1)[0].split("?", 1)[0]
        if not (path.parent / file_part).exists():
            broken.append(target)
    return broken


def unlisted_pages() -> list[str]:
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    listed = {target.split("#", 1)[0] for target in relative_links(index)}
    pages = [p.relative_to(DOCS).as_posix() for p in sorted(DOCS.rglob("*.md")) if p.name != "index.md"]
    return [page for page in pages if page not in listed]


def test_generated_pages_are_current():
    venv_python = REPO / ".venv" / "bin" / "python"
    python = str(venv_python) if venv_python.exists() else sys.executable
    result = subprocess.run(
        [python, str(DOCS / "generate.py"), "--check"], capture_output=True, text=True, cwd=REPO, timeout=300
    )
    assert result.returncode == 0, f"stale generated pages (run `make docs`):\n{result.stderr}"


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_relative_links_resolve(path: Path):
    assert broken_links(path) == [], f"{path.relative_to(REPO)} links to files that do not exist"


def test_readme_is_short():
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): a feature adds a line and a "
        "link to the README; its details go to docs/, listed in docs/index.md"
    )


def test_every_page_is_in_the_index():
    assert unlisted_pages() == [], "pages of docs/ missing from docs/index.md"


def test_the_link_parser_sees_links_and_skips_the_rest():
    text = (
        "[a](docs/a.md) [b](b.md#part) ![img](demo/x.png) [web](https://example.com) "
        "[mail](mailto:x@example.com) [here](#anchor) `[code](no.md)`\n```\n[fenced](no.md)\n```\n"
    )
    assert relative_links(text) == ["docs/a.md", "b.md#part", "demo/x.png"]
