"""Markdown to HTML for the pages the rig writes (`rig view`, `report.html`), with one CommonMark
parser: raw HTML is shown as text, never passed through (agent text is hostile), and images are
off (a page must fetch nothing its reader did not ask for)."""

from markdown_it import MarkdownIt

_MARKDOWN = MarkdownIt("commonmark", {"html": False}).disable("image")


def block_html(text: str) -> str:
    """`text` (Markdown, of any number of paragraphs, lists, code blocks) as HTML."""
    return _MARKDOWN.render(text)


def inline_html(text: str) -> str:
    """One line of Markdown (`code`, **bold**, [links](...)) as HTML without a paragraph around it."""
    return _MARKDOWN.renderInline(text)
