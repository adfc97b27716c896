"""The repository stands on its own: every relative link of its documentation resolves inside it."""

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# [text](target) and ![alt](target); the target ends at whitespace or the closing parenthesis.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)")
# Fenced code blocks hold code (`a[i](x)` is not a link).
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def documents() -> list[Path]:
    """Every Markdown file git tracks."""
    listed = subprocess.run(["git", "ls-files", "*.md"], cwd=REPO, capture_output=True, text=True, check=True)
    return [REPO / name for name in listed.stdout.split()]


def test_every_relative_link_resolves_to_a_file_in_the_repository() -> None:
    docs = documents()
    assert REPO / "README.md" in docs and REPO / "docs" / "design.md" in docs
    broken = []
    for doc in docs:
        for target in LINK.findall(FENCE.sub("", doc.read_text())):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = (doc.parent / target.split("#")[0]).resolve()
            if not path.is_relative_to(REPO) or not path.exists():
                broken.append(f"{doc.relative_to(REPO)}: {target}")
    assert broken == []
