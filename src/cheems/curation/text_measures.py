"""Measures of one response text, the quantities the response filters (`cheems.curation.filters`) judge.

- Characters: :func:`text_length` (non-whitespace characters, as a Chinese reader counts them),
  :func:`visible_chars` (also without zero-width characters), :func:`without_whitespace`, and the
  garbling signals :data:`GARBLED_CHARS` and :data:`MOJIBAKE`.
- Script: :func:`han_count`, :func:`script_counts` (Chinese and non-Chinese letters) and
  :func:`non_chinese_ratio`, judged on the prose once code, math and web addresses are left out
  (:func:`strip_code_and_formulas`; fenced blocks are found by :func:`code_fences`).
- Repetition: :func:`repeated_ngram_share` of :func:`repetition_text` (the prose without code,
  whitespace and markdown markup) and :func:`most_repeated_line`; :func:`repetition_screen`
  bounds the share for many texts at once.
- Truncation: :func:`truncation_signal` (an unclosed code fence or ``$$`` formula).

The functions that look at fenced code take ``fences``, the :func:`code_fences` of the text, when
the caller already has it, so that a text is scanned for fences once.

Cost: every measure is linear in the text length (compiled regexes and C-level str methods);
:func:`repetition_screen` is a few numpy passes and one sort over all the texts it is given.
"""

from __future__ import annotations

import re
from collections import Counter
from itertools import repeat

import numpy as np

__all__ = ["GARBLED_CHARS", "GARBLING_HINT", "HAN_RANGES", "MOJIBAKE", "NEUTRAL_LETTER_RANGES", "Fences",
           "code_fences", "code_points", "han_count", "most_repeated_line", "non_chinese_ratio",
           "repeated_ngram_share", "repetition_screen", "repetition_text", "script_counts",
           "strip_code_and_formulas", "text_length", "truncation_signal", "visible_chars", "without_whitespace"]

# ----------------------------------------------------------------------------- characters

HAN_RANGES = ((0x3400, 0x4DBF),    # CJK Unified Ideographs Extension A
              (0x4E00, 0x9FFF),    # CJK Unified Ideographs
              (0xF900, 0xFAFF),    # CJK Compatibility Ideographs
              (0x20000, 0x3FFFF))  # planes 2 and 3: extensions B-I, compatibility supplement
"""Code point ranges (inclusive) that count as Han characters."""

NEUTRAL_LETTER_RANGES = ((0x3000, 0x303F),  # CJK symbols and punctuation (incl. 々 〆 〇)
                         (0x3100, 0x312F),  # Bopomofo (Chinese phonetic symbols)
                         (0x31A0, 0x31BF),  # Bopomofo extended
                         (0xFF00, 0xFFEF))  # full-width and half-width forms
"""Ranges whose letters count neither as Chinese nor as non-Chinese."""


def _class(ranges) -> str:
    return "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges)


_HAN_RUNS = re.compile(f"[{_class(HAN_RANGES)}]+")
# letters (word characters that are not digits or "_") outside the Han and neutral ranges;
# a run may still hold a non-letter word character such as "²", so runs are checked below
_OTHER_LETTER_RUNS = re.compile(rf"[^\W\d_{_class(HAN_RANGES)}{_class(NEUTRAL_LETTER_RANGES)}]+")

GARBLED_CHARS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ue000-\uf8ff"
                           "\ufffe\uffff\U000f0000-\U0010ffff]")
"""Code points that do not belong in generated text: C0 controls other than tab, newline and
carriage return, DEL, C1 controls, lone surrogates, private-use characters and the
noncharacters U+FFFE / U+FFFF."""

# bytes 0x80-0xBF of UTF-8 as Latin-1 / Windows-1252 show them
_CONT = "\x80-\xbf\u20ac\u201a\u0192\u201e\u2026\u2020\u2021\u02c6\u2030\u0160\u2039\u0152\u017d" \
        "\u2018\u2019\u201c\u201d\u2022\u2013\u2014\u02dc\u2122\u0161\u203a\u0153\u017e\u0178"
MOJIBAKE = re.compile(f"[\u00c2\u00c3][{_CONT}]|[\u00e0-\u00ef][{_CONT}]{{2}}")
"""UTF-8 read as Latin-1 / Windows-1252: ``Ã`` or ``Â`` before a continuation byte (``Ã©`` for
é), or a three-byte lead ``à``-``ï`` before two continuation bytes (``â€œ`` for “, ``ä¸­`` for
中). Plain French or German text does not produce them."""

GARBLING_HINT = re.compile("[\ufffd" + GARBLED_CHARS.pattern[1:-1] + "\u00c2\u00c3\u00e0-\u00ef]")
"""One character class: a text without any of these has no garbling signal at all (no U+FFFD,
no :data:`GARBLED_CHARS`, no :data:`MOJIBAKE`), so the costlier checks can be skipped."""

_ZERO_WIDTH = "\u200b\u200c\u200d\u2060\ufeff"
_ZERO_WIDTH_DELETE = dict.fromkeys(map(ord, _ZERO_WIDTH))


def without_whitespace(text: str) -> str:
    """``text`` with all its whitespace removed (``str.isspace`` decides, so the full-width
    space U+3000 goes too): what duplicates are compared on and lengths are counted on."""
    return "".join(text.split())


def text_length(text: str) -> int:
    """Length of a response as a Chinese reader counts it: its non-whitespace characters.

    Every character that is not whitespace counts 1: a Han character, a Latin letter, a digit,
    a punctuation mark (Chinese ``，`` as well as ASCII ``,``), an emoji code point. Spaces,
    tabs, newlines and the full-width space U+3000 count 0, so layout does not change the
    length. Characters are Unicode code points (``str.isspace`` decides whitespace).
    ``text_length("你好, world!\\n")`` is 9. The length of length debiasing and of the bias
    tables (`cheems.curation.debias`, `cheems.curation.bias`).
    """
    return len(without_whitespace(text))


def visible_chars(text: str) -> int:
    """Number of characters of ``text`` that are neither whitespace nor zero-width
    (U+200B-U+200D, U+2060, U+FEFF): :func:`text_length` without the zero-width ones."""
    core = without_whitespace(text)
    if any(z in core for z in _ZERO_WIDTH):
        core = core.translate(_ZERO_WIDTH_DELETE)
    return len(core)


# ----------------------------------------------------------------------------- code and math

_FENCE_LINE = re.compile(r"^[ \t]*(`{3,}|~{3,})(.*)$", re.M)
_INLINE_CODE = re.compile(r"(?<!`)(`{1,2})(?!`)[^\n]+?(?<!`)\1(?!`)")
_FORMULA = re.compile(
    r"\$\$.+?\$\$"                                      # $$ display $$
    r"|\\\[.+?\\\]"                                     # \[ display \]
    r"|\\\(.+?\\\)"                                     # \( inline \)
    r"|\\begin\{([A-Za-z]+\*?)\}.*?\\end\{\1\}"         # \begin{align} ... \end{align}
    r"|(?<![\\$])\$(?![\s$])(?:\\.|[^$\\\n])+?(?<![\s\\])\$(?![\d$])",  # $x$, not "$5 和 $10"
    re.S)
_ADDRESS = re.compile(
    r"(?:(?:https?|ftp)://|www\.)[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+"     # URL
    r"|[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}"                     # e-mail
    r"|(?<![\w.@/-])(?:[A-Za-z0-9\-]+\.)+(?:com|org|net|edu|gov|io|cn|ai|co|dev|info)"
    r"(?![A-Za-z0-9\-])(?:/[A-Za-z0-9\-._~:/?#@!$&'*+,;=%]*)?")              # bare domain
_ADDRESS_HINT = re.compile(r"://|www\.|@|\.(?:co|org|net|edu|gov|io|cn|ai|dev|info)")
# a text without an _ADDRESS_HINT match has no address (and is scanned five times faster)

Fences = tuple[list[tuple[int, int]], bool]
"""What :func:`code_fences` returns: the fenced blocks' ``(start, end)`` spans and whether the
last one is left open."""


def code_fences(text: str) -> Fences:
    """Spans of fenced code blocks and whether the last one is left open.

    A fence is a line of three or more backticks or tildes (any indentation, an info string
    such as ``python`` allowed on the opening line); the block ends at a line holding only a
    fence of the same character at least as long. An open block runs to the end of the text.
    """
    if "```" not in text and "~~~" not in text:
        return [], False
    spans = []
    opened: tuple[int, str, int] | None = None  # (start, fence char, fence length)
    for m in _FENCE_LINE.finditer(text):
        fence, rest = m.group(1), m.group(2)
        if opened is None:
            if fence[0] == "`" and "`" in rest:  # ```a``` on one line is inline code
                continue
            opened = (m.start(), fence[0], len(fence))
        elif fence[0] == opened[1] and len(fence) >= opened[2] and not rest.strip():
            spans.append((opened[0], m.end()))
            opened = None
    if opened is not None:
        spans.append((opened[0], len(text)))
    return spans, opened is not None


def _cut(text: str, spans: list[tuple[int, int]], fill: str) -> str:
    parts, last = [], 0
    for a, b in spans:
        parts.append(text[last:a])
        last = b
    parts.append(text[last:])
    return fill.join(parts)


def _without_fenced_code(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` with each fenced block replaced by a newline."""
    return _cut(text, spans, "\n") if spans else text


def strip_code_and_formulas(text: str, code: bool = True, formulas: bool = True,
                            urls: bool = True, fences: Fences | None = None) -> str:
    """The text without its code, math and web addresses, for judging the language of the
    prose around them.

    ``code``: fenced blocks are replaced by a newline and inline ```code``` / ````code````
    spans (on one line) by a space. A fenced block opens at a line of three or more backticks
    or tildes (any indentation, an info string such as ``python`` allowed) and closes at a
    line holding only a fence of the same character at least as long; an unclosed block runs
    to the end of the text. ``formulas``: ``$$...$$``, ``\\[...\\]``, ``\\(...\\)``,
    ``\\begin{env}...\\end{env}`` and inline ``$...$`` are replaced by a space. An inline
    ``$...$`` stays on one line, starts with no space after the opening ``$``, has none
    before the closing one and is not followed by a digit, so prices such as ``$5 和 $10``
    are left alone. Code is removed before formulas, so a ``$`` inside code is not math.
    ``urls``: web addresses (``http://``, ``https://``, ``ftp://`` or ``www.`` followed by
    ASCII URL characters, and bare domains such as ``hbr.org/topic`` under a common top-level
    domain) and e-mail addresses are replaced by a space. ``fences``: :func:`code_fences` of
    ``text`` when already known.
    """
    if code:
        spans = (fences or code_fences(text))[0]
        if spans:
            text = _cut(text, spans, "\n")
        if "`" in text:
            text = _INLINE_CODE.sub(" ", text)
    if formulas and ("$" in text or "\\" in text):
        text = _FORMULA.sub(" ", text)
    if urls and _ADDRESS_HINT.search(text):
        text = _ADDRESS.sub(" ", text)
    return text


# ----------------------------------------------------------------------------- script

def han_count(text: str) -> int:
    """Number of Han characters in ``text``: code points in :data:`HAN_RANGES` (CJK Unified
    Ideographs with all extensions, CJK Compatibility Ideographs and their supplement)."""
    return sum(map(len, _HAN_RUNS.findall(text)))


def script_counts(text: str) -> tuple[int, int]:
    """``(Chinese, non-Chinese)`` letter counts of ``text``, nothing stripped.

    Chinese: Han characters (:func:`han_count`). Non-Chinese: every other letter
    (``str.isalpha``: Latin, Greek, Cyrillic, kana, Hangul, Arabic, ...) outside
    :data:`NEUTRAL_LETTER_RANGES`. Everything else is neutral and counts in neither: digits,
    whitespace, punctuation (ASCII and Chinese), symbols, emoji, full-width forms, combining
    marks.
    """
    other = 0
    for run in _OTHER_LETTER_RUNS.findall(text):
        other += len(run) if run.isalpha() else sum(map(str.isalpha, run))
    return han_count(text), other


def non_chinese_ratio(text: str, exempt_code: bool = True, exempt_formulas: bool = True,
                      exempt_urls: bool = True) -> float:
    """Share of non-Chinese letters among the meaningful characters of ``text``.

    Meaningful characters are the letters :func:`script_counts` counts: Han characters and
    non-Chinese letters; the ratio is ``non_chinese / (han + non_chinese)`` and 0.0 for a text
    with neither. Code, formulas and web / e-mail addresses are left out first
    (:func:`strip_code_and_formulas`) unless ``exempt_code`` / ``exempt_formulas`` /
    ``exempt_urls`` is False. ``"使用 Python 的 pandas 库"`` has 4
    Han characters and 12 Latin letters: 0.75; ``"答案是 42。"`` has 0.0.
    """
    han, other = script_counts(strip_code_and_formulas(text, exempt_code, exempt_formulas,
                                                       exempt_urls))
    return other / (han + other) if han + other else 0.0


# ----------------------------------------------------------------------------- repetition

def repeated_ngram_share(text: str, n: int = 20, min_repeats: int = 3) -> float:
    """Share of the characters of ``text`` covered by a repeated n-gram.

    A character is covered when some occurrence of an ``n``-character substring that occurs
    at least ``min_repeats`` times in ``text`` (overlapping occurrences count) spans it. Returns
    covered characters / ``len(text)`` (0.0 for a text shorter than ``n``). O(len * n): one
    dict of n-gram counts, one pass marking coverage.
    """
    windows = len(text) - n + 1
    if windows < min_repeats:
        return 0.0
    grams = [text[i:i + n] for i in range(windows)]
    counts = Counter(grams)
    if len(counts) == windows or max(counts.values()) < min_repeats:
        return 0.0
    covered = end = 0  # end: one past the last covered position so far
    for i, g in enumerate(grams):
        if counts[g] >= min_repeats:
            covered += i + n - (i if i > end else end)
            end = i + n
    return covered / len(text)


_MARKUP = re.compile(r"[\s*#_\-|>`~]+")
_UNIT_SPLIT = re.compile(r"[\n。！？!?]+")


def repetition_text(text: str, fences: Fences | None = None) -> str:
    """What the repetition rule measures: ``text`` without its fenced code blocks, whitespace
    and the markdown markup characters ``* # _ - | > ` ~``.

    Headings, bullets, bold labels and table rules repeat in any well-structured answer and
    say nothing about looping, so they are dropped; code repeats boilerplate by nature and a
    looping code block usually ends cut off, which the ``truncated`` rule sees.
    ``"### 方案一\n\n**优点：** 成本低"`` becomes ``"方案一优点：成本低"``. ``fences``:
    :func:`code_fences` of ``text`` when already known.
    """
    spans = (fences or code_fences(text))[0]
    return _MARKUP.sub("", _without_fenced_code(text, spans))


def most_repeated_line(text: str, min_chars: int, fences: Fences | None = None) -> tuple[str, int]:
    """The line or sentence that occurs most often in ``text`` and its count (``("", 0)`` if
    none qualifies). Fenced code is left out; units are split at newlines and ``。！？!?``,
    compared without whitespace and markup (as :func:`repetition_text` does), and only those
    of at least ``min_chars`` characters count. ``fences``: :func:`code_fences` of ``text``
    when already known.

    Because the units' text is part of :func:`repetition_text`, a unit of at least n
    characters that occurs c times puts its first n-gram at least c times there.
    """
    prose = _without_fenced_code(text, (fences or code_fences(text))[0])
    counts = Counter(u for u in map(_MARKUP.sub, repeat(""), _UNIT_SPLIT.split(prose))
                     if len(u) >= min_chars)
    if not counts:
        return "", 0
    unit, c = counts.most_common(1)[0]
    return unit, c


# ----------------------------------------------------------------------------- truncation

def truncation_signal(text: str, fences: Fences | None = None) -> str | None:
    """Why ``text`` looks cut off, or None. The heuristics, each cheap and rare in a finished
    answer: a fenced code block (a line of three or more backticks or tildes) that is never
    closed; an odd number of ``$$`` outside code (a display formula left open). ``fences``:
    :func:`code_fences` of ``text`` when already known."""
    spans, unclosed = fences or code_fences(text)
    if unclosed:
        return "unclosed code fence"
    if "$$" in text:
        rest = _without_fenced_code(text, spans)
        if "`" in rest:
            rest = _INLINE_CODE.sub(" ", rest)
        if rest.count("$$") % 2:
            return "unclosed $$ formula"
    return None


# ----------------------------------------------------------------------------- hashed screening
# Repeated n-grams are screened for a batch of texts at once with numpy, on 64-bit hashes of the
# character windows (one sort per batch). Equal windows get equal hashes, so a hashed count is
# never below the true count: the screened repetition share is an upper bound, and only a text
# whose bound passes the threshold need be measured exactly (repeated_ngram_share).

_MIX = np.uint64(0x9E3779B97F4A7C15)
_MIX_PIECES = np.uint64(0xC2B2AE3D27D4EB4F)
_TEXT_MIX = np.uint64(0xD6E8FEB86659FD93)


def code_points(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Code points of the concatenated texts (uint64) and each text's length."""
    lens = np.fromiter(map(len, texts), np.int64, len(texts))
    data = "".join(texts).encode("utf-32-le", "surrogatepass")
    return np.frombuffer(data, np.uint32).astype(np.uint64), lens


def _windows(cp: np.ndarray, lens: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Hash, start and text index of every ``n``-code-point window lying inside one text."""
    w = len(cp) - n + 1
    if w <= 0:
        none = np.zeros(0, np.int64)
        return none.astype(np.uint64), none, none
    # hashes of windows of 1, 2, 4, 8, ... code points, each from two halves (mod 2**64), then
    # the n-window from the power-of-two pieces of n: O(log n) array operations, not O(n)
    pieces = {1: cp}
    size = 1
    while 2 * size <= n:
        half = pieces[size]
        pieces[2 * size] = (half[:len(half) - size] * _MIX) ^ half[size:]
        size *= 2
    h, at = None, 0
    for size in sorted(pieces, reverse=True):
        if n & size:
            part = pieces[size][at:at + w]
            h = part.copy() if h is None else (h * _MIX_PIECES) ^ part
            at += size
    ends = np.cumsum(lens)
    tid = np.repeat(np.arange(len(lens)), lens)[:w]
    start = np.arange(w)
    inside = start + n <= ends[tid]
    return h[inside], start[inside], tid[inside]


def _runs(sorted_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start index and length of each run of equal values in a sorted array."""
    edges = np.flatnonzero(np.concatenate(([True], sorted_keys[1:] != sorted_keys[:-1], [True])))
    return edges[:-1], np.diff(edges)


def repetition_screen(texts: list[str], n: int, min_repeats: int) -> tuple[np.ndarray, np.ndarray]:
    """For each text, an upper bound of ``repeated_ngram_share(text, n, min_repeats)`` and of
    the largest number of occurrences of one n-gram. Both are exact unless two different
    n-grams of a text share a 64-bit hash."""
    share = np.zeros(len(texts))
    most = np.zeros(len(texts), np.int64)
    if not texts:
        return share, most
    cp, lens = code_points(texts)
    h, start, tid = _windows(cp, lens, n)
    if not len(h):
        return share, most
    key = h ^ (tid.astype(np.uint64) * _TEXT_MIX)  # the same n-gram in two texts: two keys
    order = np.argsort(key)
    first, count = _runs(key[order])
    np.maximum.at(most, tid[order[first]], count)
    repeated = np.repeat(count >= min_repeats, count)
    if not repeated.any():
        return share, most
    covering = start[order[repeated]]  # starts of the windows whose n-gram repeats
    total = len(cp)
    depth = np.cumsum(np.bincount(covering, minlength=total)[:total]
                      - np.bincount(covering + n, minlength=total + n)[:total])
    covered = np.concatenate(([0], np.cumsum(depth > 0)))
    ends = np.cumsum(lens)
    np.divide(covered[ends] - covered[ends - lens], lens, out=share, where=lens > 0)
    return share, most
