"""The report as document blocks (headings, paragraphs, lists, tables, images), rendered to Markdown or
to one self-contained HTML page, and the number formats of its cells."""

import base64
import html
import math
from dataclasses import dataclass, field
from pathlib import Path

from rig.report.markdown_html import inline_html

DASH = "—"

# -- document blocks ----------------------------------------------------------------------------
#
# Inline text uses a tiny Markdown subset that both renderers understand: `code`, **bold** and
# [text](relative link).


@dataclass(frozen=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True)
class Para:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: list[str]


@dataclass(frozen=True)
class Table:
    headers: list[str]
    rows: list[list[str]]
    # Columns (by index) aligned right: the numeric ones.
    right: frozenset[int] = field(default_factory=frozenset)


@dataclass(frozen=True)
class Image:
    path: Path
    rel: str
    caption: str


Block = Heading | Para | Bullets | Table | Image


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(blocks: list[Block]) -> str:
    """The blocks as GitHub-flavoured Markdown; images are linked by their relative path."""
    out: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            out.append("#" * block.level + " " + block.text)
        elif isinstance(block, Para):
            out.append(block.text)
        elif isinstance(block, Bullets):
            out.append("\n".join(f"- {item}" for item in block.items))
        elif isinstance(block, Table):
            aligns = ["---:" if i in block.right else ":---" for i in range(len(block.headers))]
            lines = [
                "| " + " | ".join(_md_cell(h) for h in block.headers) + " |",
                "| " + " | ".join(aligns) + " |",
            ]
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in block.rows]
            out.append("\n".join(lines))
        else:
            out.append(f"![{block.caption}]({block.rel})\n\n*{block.caption}*")
    return "\n\n".join(out) + "\n"


_CSS = """
body { font: 15px/1.5 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #1f2328;
       max-width: 1180px; margin: 2em auto; padding: 0 1.5em; }
h1 { border-bottom: 2px solid #d0d7de; padding-bottom: .3em; }
h2 { border-bottom: 1px solid #d0d7de; padding-bottom: .2em; margin-top: 2em; }
table { border-collapse: collapse; margin: .8em 0 1.2em; font-size: 13px; }
th, td { border: 1px solid #d0d7de; padding: 4px 9px; vertical-align: top; }
th { background: #f6f8fa; text-align: left; }
td.r, th.r { text-align: right; font-variant-numeric: tabular-nums; }
tr:nth-child(even) td { background: #fbfbfc; }
code { font: 12px/1.4 ui-monospace, Menlo, Consolas, monospace; background: #f3f4f6;
       padding: 1px 4px; border-radius: 4px; }
figure { margin: 1.2em 0; }
figure img { max-width: 100%; border: 1px solid #eaeef2; }
figcaption { color: #57606a; font-size: 13px; }
"""


def render_html(blocks: list[Block], title: str) -> str:
    """The blocks as one self-contained HTML page: inline CSS, figures as base64 PNG data URIs."""
    body: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            body.append(f"<h{block.level}>{inline_html(block.text)}</h{block.level}>")
        elif isinstance(block, Para):
            body.append(f"<p>{inline_html(block.text)}</p>")
        elif isinstance(block, Bullets):
            items = "".join(f"<li>{inline_html(item)}</li>" for item in block.items)
            body.append(f"<ul>{items}</ul>")
        elif isinstance(block, Table):

            def cell(tag: str, i: int, text: str, right: frozenset[int] = block.right) -> str:
                cls = ' class="r"' if i in right else ""
                return f"<{tag}{cls}>{inline_html(text)}</{tag}>"

            head = "".join(cell("th", i, h) for i, h in enumerate(block.headers))
            rows = "".join(
                "<tr>" + "".join(cell("td", i, c) for i, c in enumerate(row)) + "</tr>" for row in block.rows
            )
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        else:
            data = base64.b64encode(block.path.read_bytes()).decode("ascii")
            caption = inline_html(block.caption)
            body.append(
                f'<figure><img alt="{html.escape(block.caption)}" src="data:image/png;base64,{data}">'
                f"<figcaption>{caption}</figcaption></figure>"
            )
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )


# -- number formats ---------------------------------------------------------------------------


def is_missing(value: object) -> bool:
    """Whether a cell's value is absent: None, NaN or not a number."""
    if value is None:
        return True
    try:
        return math.isnan(float(value))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return True


def fmt_pct(value: object, digits: int = 1) -> str:
    """A share in [0, 1] as a percentage, e.g. 0.6667 -> "66.7%"."""
    return DASH if is_missing(value) else f"{float(value) * 100:.{digits}f}%"  # type: ignore[arg-type]


def fmt_ci_pct(low: object, high: object) -> str:
    """A CI of a share as "[40.0%, 85.1%]"."""
    if is_missing(low) or is_missing(high):
        return DASH
    return f"[{fmt_pct(low)}, {fmt_pct(high)}]"


def fmt_p(value: object) -> str:
    """A p-value with 3 significant digits."""
    return DASH if is_missing(value) else f"{float(value):.3g}"  # type: ignore[arg-type]


def fmt_usd(value: object) -> str:
    """Dollars with 4 decimals (one run costs cents or less)."""
    return DASH if is_missing(value) else f"${float(value):.4f}"  # type: ignore[arg-type]


def fmt_count(value: object) -> str:
    """A count or median count: thousands separators, decimals only when there are any."""
    if is_missing(value):
        return DASH
    number = float(value)  # type: ignore[arg-type]
    return f"{number:,.0f}" if number.is_integer() else f"{number:,.1f}"


def fmt_seconds(value: object) -> str:
    """Seconds with one decimal."""
    return DASH if is_missing(value) else f"{float(value):.1f} s"  # type: ignore[arg-type]


def short(digest: str) -> str:
    """A hash as the report shows it: 12 hex digits tell them apart."""
    return digest[:12]


def plural(count: int, noun: str) -> str:
    """`count` and `noun`, with an s unless the count is one."""
    return f"{count} {noun}{'' if count == 1 else 's'}"
