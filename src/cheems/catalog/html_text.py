"""HTML as readable plain text, for datasets whose texts are HTML (Stack Exchange posts).

The rules, applied once here:

- text is unescaped (``&lt;`` -> ``<``) and runs of white space collapse to one space, as a
  browser shows them; ``<br>`` is a line break;
- blocks (``p``, ``div``, headings, ``blockquote``, ``table`` rows, ...) are paragraphs,
  separated by a blank line; a quote's lines start with ``> ``;
- list items are lines starting with ``- `` (``1. ``, ``2. `` in an ``ol``), one per line,
  nested lists indented by two spaces per level;
- ``<pre>`` keeps its text exactly, fenced by lines of three backticks; inline ``<code>`` is
  wrapped in single backticks;
- table cells are joined by `` | ``; an image is its alt text; ``script`` and ``style`` are
  dropped; every other tag (links, emphasis, unknown tags) keeps its text and loses the tag.

LaTeX written between ``$`` signs (as Stack Exchange's MathJax posts are) is plain text to the
parser and so stays as it is, apart from white space collapsing inside it.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

__all__ = ["html_text"]

_BLOCKS = frozenset({"p", "div", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "table", "tr", "hr",
                     "dl", "dt", "dd", "section", "article", "header", "footer", "figure", "ul", "ol", "li",
                     "pre"})
_DROPPED = frozenset({"script", "style"})
_SPACES = re.compile(r"[^\S\n]+")
_AROUND_BREAK = re.compile(r" *\n *")


class _TextBuilder(HTMLParser):
    """Collects paragraphs as (text, group) pairs: paragraphs of one group (the items of one
    outermost list, the rows of one table) follow each other line by line; anything else is
    separated by a blank line. Group 0 is no group."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.paragraphs: list[tuple[str, int]] = []
        self.inline: list[str] = []
        self.lists: list[list] = []  # one [ordered, items so far, marker width] per open list
        self.item_prefix: str | None = None  # the marker the next paragraph of a list item takes
        self.group = 0
        self.groups = 0  # groups opened so far
        self.group_depth = 0  # lists and tables open
        self.quote = 0
        self.pre = 0
        self.dropped = 0
        self.cells = 0

    # -- paragraphs
    def flush(self) -> None:
        raw = "".join(self.inline)
        self.inline = []
        if self.pre:
            return
        text = _AROUND_BREAK.sub("\n", _SPACES.sub(" ", raw)).strip()
        if text:
            self.add(text)

    def add(self, text: str) -> None:
        indent = "  " * max(len(self.lists) - 1, 0)
        hanging = indent + " " * (self.lists[-1][2] if self.lists else 0)  # under the item's text
        lead = hanging
        if self.item_prefix is not None:
            lead, self.item_prefix = indent + self.item_prefix, None
        lines = text.split("\n")
        lines = [lead + lines[0]] + [hanging + line for line in lines[1:]]
        if self.quote:
            lines = ["> " * self.quote + line for line in lines]
        self.paragraphs.append(("\n".join(lines), self.group))

    # -- the parser's callbacks
    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _DROPPED:
            self.dropped += 1
        elif self.pre:
            return  # markup inside <pre> (its <code>) keeps only its text
        elif tag in _BLOCKS:
            self.flush()
            self.open_block(tag)
        elif tag == "br":
            self.inline.append("\n")
        elif tag == "code":
            self.inline.append("`")
        elif tag in ("td", "th"):
            self.inline.append(" | " if self.cells else "")
            self.cells += 1
        elif tag == "img":
            alt = dict(attrs).get("alt")
            if alt:
                self.inline.append(alt)

    def open_block(self, tag: str) -> None:
        if tag == "blockquote":
            self.quote += 1
        elif tag in ("ul", "ol"):
            self.open_group()
            self.lists.append([tag == "ol", 0, 0])
        elif tag == "li":
            if not self.lists:  # an item outside any list: read it as one of a bullet list
                self.open_group()
                self.lists.append([False, 0, 0])
            current = self.lists[-1]
            current[1] += 1
            self.item_prefix = f"{current[1]}. " if current[0] else "- "
            current[2] = len(self.item_prefix)
        elif tag == "table":
            self.open_group()
        elif tag == "tr":
            self.cells = 0
        elif tag == "pre":
            self.pre += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in _DROPPED:
            self.dropped = max(self.dropped - 1, 0)
        elif tag == "pre" and self.pre:
            self.pre -= 1
            code = "".join(self.inline).strip("\n")
            self.inline = []
            if code.strip():
                self.add("```\n" + code + "\n```")
        elif self.pre:
            return
        elif tag in _BLOCKS:
            self.flush()
            self.close_block(tag)
        elif tag == "code":
            self.inline.append("`")

    def close_block(self, tag: str) -> None:
        if tag == "blockquote":
            self.quote = max(self.quote - 1, 0)
        elif tag in ("ul", "ol") and self.lists:
            self.lists.pop()
            self.close_group()
        elif tag == "li":
            self.item_prefix = None
        elif tag == "table":
            self.close_group()

    def open_group(self) -> None:
        if not self.group_depth:
            self.groups += 1
            self.group = self.groups
        self.group_depth += 1

    def close_group(self) -> None:
        self.group_depth = max(self.group_depth - 1, 0)
        if not self.group_depth:
            self.group = 0

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag in _BLOCKS or tag in _DROPPED:
            self.handle_endtag(tag)

    def handle_data(self, data: str) -> None:
        if self.dropped:
            return
        self.inline.append(data if self.pre else _SPACES.sub(" ", data.replace("\n", " ")))


def html_text(html: str) -> str:
    """``html`` as plain text by the rules in this module's docstring: paragraphs separated by
    a blank line, list items one per line, code blocks fenced, entities unescaped. Linear in
    the length of the input."""
    builder = _TextBuilder()
    builder.feed(html)
    builder.close()
    builder.flush()
    parts: list[str] = []
    previous = 0
    for text, group in builder.paragraphs:
        if parts:
            parts.append("\n" if group and group == previous else "\n\n")
        parts.append(text)
        previous = group
    return "".join(parts)
