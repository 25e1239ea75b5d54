"""Markdown to safe HTML for the annotation page: prompts and responses are untrusted text.

Three steps, each with one job:

1. markdown-it-py (CommonMark + tables + strikethrough, single newlines kept as ``<br>``) with raw HTML
   disabled, so ``<script>`` typed in a response is shown as text rather than parsed;
2. fenced code is highlighted by pygments into ``<pre class="highlight">`` with token classes whose colours
   live in ``static/style.css``;
3. nh3 (the ammonia sanitiser) keeps only the tags, attributes and classes listed below, links only to
   absolute http/https/mailto URLs, and no ``on*`` handlers, no styles (but table alignment), no
   ``javascript:`` or ``data:`` URLs.

Step 3 alone decides what reaches the browser; steps 1 and 2 only decide what looks right.
"""

from __future__ import annotations

import nh3
from markdown_it import MarkdownIt
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import TextLexer, get_lexer_by_name
from pygments.token import STANDARD_TYPES
from pygments.util import ClassNotFound

__all__ = ["render_markdown", "ALLOWED_TAGS", "URL_SCHEMES", "CODE_CSS_CLASS"]

CODE_CSS_CLASS = "highlight"  # the <pre> of highlighted code; style.css scopes the token colours under it
URL_SCHEMES = frozenset({"http", "https", "mailto"})
ALLOWED_TAGS = frozenset({
    "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "strong", "em", "del", "s", "code", "pre", "span",
    "blockquote", "ul", "ol", "li", "a", "img", "table", "thead", "tbody", "tr", "th", "td", "sup", "sub",
})
ALLOWED_ATTRIBUTES = {
    "a": {"href", "title"},
    "img": {"src", "alt", "title"},
    "ol": {"start"},
    "th": {"style"},  # markdown-it writes column alignment as style="text-align:right"
    "td": {"style"},
}
# pygments' short token classes ("k", "s2", "nf", ...) are the only classes kept, and only on <span>
TOKEN_CLASSES = frozenset(c for c in STANDARD_TYPES.values() if c)
ALLOWED_CLASSES = {"pre": {CODE_CSS_CLASS}, "span": set(TOKEN_CLASSES)}

_FORMATTER = HtmlFormatter(nowrap=True)


def _highlight_code(code: str, lang: str, _attrs: str) -> str:
    """A fenced block as ``<pre class="highlight"><code>…</code></pre>``; unknown languages stay plain."""
    try:
        lexer = get_lexer_by_name(lang) if lang else TextLexer()
    except ClassNotFound:
        lexer = TextLexer()
    body = highlight(code, lexer, _FORMATTER)
    return f'<pre class="{CODE_CSS_CLASS}"><code>{body}</code></pre>'


_MARKDOWN = (MarkdownIt("commonmark", {"html": False, "breaks": True, "highlight": _highlight_code})
             .enable("table").enable("strikethrough"))


def render_markdown(text: str) -> str:
    """Render untrusted Markdown ``text`` to sanitised HTML, safe to insert with ``innerHTML``.

    Raw HTML in ``text`` comes out escaped (visible as text); links keep only http, https and mailto
    targets and open in a new tab; code fences are highlighted with pygments token classes.
    """
    html = _MARKDOWN.render(text)
    return nh3.clean(
        html,
        tags=set(ALLOWED_TAGS),
        clean_content_tags={"script", "style"},
        attributes={tag: set(attrs) for tag, attrs in ALLOWED_ATTRIBUTES.items()},
        allowed_classes={tag: set(classes) for tag, classes in ALLOWED_CLASSES.items()},
        url_schemes=set(URL_SCHEMES),
        filter_style_properties={"text-align"},
        link_rel="noopener noreferrer nofollow",
        set_tag_attribute_values={"a": {"target": "_blank"}},
        url_relative="deny",  # a relative link would point into this app itself
        strip_comments=True,
    )

