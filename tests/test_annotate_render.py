"""render_markdown: responses are untrusted, so every XSS trick must come out inert, while code is
highlighted and Chinese text survives untouched.

"Inert" is checked on the parsed output (html.parser), not on substrings: no <script>/<iframe>/<svg>/
<object>/<style> element, no ``on*`` attribute, no ``style`` outside table cells, and every href/src an
absolute http/https/mailto URL. A hypothesis property runs the same checks on random mixes of dangerous
fragments.
"""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cheems.annotate.render import ALLOWED_TAGS, render_markdown

SAFE_SCHEMES = ("http://", "https://", "mailto:")


class Collect(HTMLParser):
    """Every start tag of a document with its attributes."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    handle_startendtag = handle_starttag


def parsed_tags(out: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = Collect()
    parser.feed(out)
    parser.close()
    return parser.tags


def assert_inert(out: str) -> None:
    """No executable markup in ``out``, checked both on the raw string and on the parsed tags."""
    assert "<script" not in out.lower()
    # the sanitiser escapes < and > in text and in attribute values, so every <...> is a tag; with its
    # quoted values removed, no attribute name may start with "on"
    for tag in re.findall(r"<[^<>]*>", out):
        names = re.sub(r'"[^"]*"', '""', tag)
        assert not re.search(r"\son\w+\s*=", names, re.IGNORECASE), tag
    for tag, attrs in parsed_tags(out):
        assert tag in ALLOWED_TAGS, (tag, out)
        for name, value in attrs.items():
            assert not name.startswith("on"), (tag, name, out)
            if name in ("href", "src"):
                url = html.unescape(value or "").strip().lower()
                assert url.startswith(SAFE_SCHEMES), (tag, name, value)
            if name == "style":
                assert tag in ("th", "td") and re.fullmatch(r"text-align:\s*(left|right|center);?", value or ""), value
    for tag in re.findall(r"<[^<>]*>", out):
        for url in re.findall(r'(?:href|src)\s*=\s*"([^"]*)"', tag, re.IGNORECASE):
            # the scheme, read as a browser reads it (entities decoded, whitespace dropped); a safe
            # URL may hold the word in its path (http://x.example/javascript:)
            assert not re.sub(r"\s", "", html.unescape(url)).lower().startswith("javascript:"), tag


XSS_PAYLOADS = [
    "<script>alert(1)</script>",
    "<SCRIPT SRC=//evil.example/x.js></SCRIPT>",
    "<img src=x onerror=alert(1)>",
    '<img src="x" onerror="window.__pwned=1">',
    "<svg onload=alert(1)>",
    "<svg><script>alert(1)</script></svg>",
    "<iframe src=javascript:alert(1)></iframe>",
    "<body onload=alert(1)>",
    '<a href="javascript:alert(1)">点我</a>',
    "<a href='jav&#x09;ascript:alert(1)'>x</a>",
    "[点我](javascript:alert(1))",
    "[点我](JaVaScRiPt:alert(1))",
    "[x](&#106;&#97;&#118;&#97;&#115;&#99;&#114;&#105;&#112;&#116;&#58;alert(1))",
    "[x](javascript&colon;alert(1))",
    "[x](<javascript:alert(1)>)",
    "[x](vbscript:msgbox(1))",
    "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "![img](data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9YWxlcnQoMSk+)",
    "![img](javascript:alert(1))",
    '![x" onerror="alert(1)](https://example.com/a.png)',
    '[x](https://example.com "title\\" onmouseover=\\"alert(1)")',
    "<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>",
    "<style>body{background:url(javascript:alert(1))}</style>",
    "<div style=\"background:url(javascript:alert(1))\">x</div>",
    "&lt;script&gt;alert(1)&lt;/script&gt;",
    "&#60;img src=x onerror=alert(1)&#62;",
    "<!--<img src=x onerror=alert(1)>-->",
    "<details open ontoggle=alert(1)>",
    "```html\n<script>alert(1)</script>\n```",
    "`<img src=x onerror=alert(1)>`",
    "<object data=javascript:alert(1)></object>",
    "<form action=javascript:alert(1)><button>提交</button></form>",
    "[x](//evil.example/path)",
    "[x](/api/logout)",
]


@pytest.mark.parametrize("payload", XSS_PAYLOADS)
def test_xss_payloads_are_inert(payload):
    out = render_markdown(payload)
    assert_inert(out)
    assert_inert(render_markdown(f"前文：{payload} 后文\n\n- 列表 {payload}\n\n> 引用 {payload}"))


def test_raw_html_is_shown_as_text():
    out = render_markdown("请看 <script>window.__pwned=1</script> 和 <b>粗体</b>")
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in out
    assert "&lt;b&gt;粗体&lt;/b&gt;" in out
    assert "<b>" not in out


def test_dangerous_links_do_not_become_links():
    for md in ("[点我](javascript:alert(1))", "[x](data:text/html,<script>alert(1)</script>)",
               "<a href='javascript:alert(1)'>x</a>"):
        out = render_markdown(md)
        assert not [attrs for tag, attrs in parsed_tags(out) if "href" in attrs], out


def test_safe_links_kept_and_hardened():
    out = render_markdown("[文档](https://example.com/路径?q=中文) 和 [邮件](mailto:a@example.com)")
    hrefs = [attrs["href"] for tag, attrs in parsed_tags(out) if tag == "a"]
    assert hrefs == ["https://example.com/%E8%B7%AF%E5%BE%84?q=%E4%B8%AD%E6%96%87", "mailto:a@example.com"]
    for tag, attrs in parsed_tags(out):
        if tag == "a":
            assert attrs["target"] == "_blank"
            assert {"noopener", "noreferrer"} <= set(attrs["rel"].split())


def test_relative_links_lose_their_target():
    out = render_markdown("[退出](/api/logout) [外站](//evil.example/x)")
    assert [tag for tag, attrs in parsed_tags(out)] == ["p", "a", "a"]
    assert not [attrs for tag, attrs in parsed_tags(out) if "href" in attrs], out


def test_code_fence_is_highlighted():
    out = render_markdown("```python\ndef 加(x):\n    return x + 1  # 注释\n```")
    assert '<pre class="highlight"><code>' in out
    assert '<span class="k">def</span>' in out
    assert '<span class="k">return</span>' in out
    assert "加" in out and "# 注释" in out


def test_code_fence_unknown_language_and_plain_fence():
    for md in ("```nosuchlanguage\n<b>x</b>\n```", "```\n<b>x</b>\n```", "    <b>缩进代码</b>"):
        out = render_markdown(md)
        assert "&lt;b&gt;" in out and "<b>" not in out, out


def test_highlight_stylesheet_is_shipped():
    from importlib import resources

    css = resources.files("cheems.annotate").joinpath("static/style.css").read_text(encoding="utf-8")
    assert "pre.highlight .k " in css and "pre.highlight .s1 " in css


def test_chinese_text_and_punctuation_survive():
    text = "北京是中国的首都，人口约两千万。“引号”《书名》——破折号……省略号！？（全角括号）😀"
    out = render_markdown(text)
    assert text in html.unescape(out)
    assert out.startswith("<p>")


def test_markdown_structure_kept():
    out = render_markdown("# 标题\n\n**粗体** *斜体* ~~删除~~\n\n1. 一\n2. 二\n\n| 列1 | 列2 |\n|:--|--:|\n| 甲 | 乙 |")
    for fragment in ("<h1>标题</h1>", "<strong>粗体</strong>", "<em>斜体</em>", "<s>删除</s>", "<ol>",
                     "<li>一</li>", "<table>", '<td style="text-align:right">乙</td>'):
        assert fragment in out, (fragment, out)


def test_single_newlines_are_line_breaks():
    assert "<br>" in render_markdown("第一行\n第二行")


FRAGMENTS = [
    "<script>", "</script>", "<img src=x onerror=alert(1)>", "<svg onload=alert(1)>", "javascript:", "JaVaScRiPt:",
    "&#106;avascript:", "&#x6A;avascript:", "java\tscript:", "data:text/html,", "[", "]", "(", ")", "<", ">", '"',
    "'", "`", "```", "\n", " ", "=", "onerror=", "onload=", "<a href=", "<iframe", "![", "<style>", "&", ";", "#",
    "alert(1)", "中文", "，", "。", "http://x.example/", "mailto:", "<", "/>", "*", "_", "|", "- ", "> ",
]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=4), max_size=40).map("".join))
@example("<http://x.example/javascript:>")  # the word in a safe URL's path: a link, not a script
@example("[x](javascript:alert(1))<http://x.example/>")
def test_property_random_dangerous_mixes_are_inert(text):
    assert_inert(render_markdown(text))


def test_empty_and_whitespace_input():
    assert render_markdown("") == ""
    assert render_markdown("   \n\n  ").strip() == ""


def test_the_pages_use_installed_cjk_fonts_and_ship_none():
    """The font stack names the CJK fonts of common Linux desktops after the macOS and Windows ones;
    the app ships no font file, declares no @font-face and loads nothing from elsewhere."""
    from pathlib import Path

    import cheems.annotate

    static = Path(cheems.annotate.__file__).with_name("static")
    assert {p.suffix for p in static.iterdir()} <= {".html", ".js", ".css"}
    css = (static / "style.css").read_text(encoding="utf-8")
    stack = re.search(r":root\s*\{[^}]*?font-family:([^;]+);", css, re.S).group(1)
    fonts = [f.strip().strip('"') for f in stack.split(",")]
    for name in ("Noto Sans CJK SC", "WenQuanYi Micro Hei", "Source Han Sans SC", "PingFang SC", "Microsoft YaHei"):
        assert name in fonts, name
    assert fonts[-1] == "sans-serif"
    for page in static.iterdir():
        text = page.read_text(encoding="utf-8")
        assert "@font-face" not in text and "url(" not in text and "fonts.googleapis" not in text, page.name
        assert not re.search(r"""(src|href)=["']?(https?:)?//""", text), page.name
