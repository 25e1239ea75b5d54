"""The rules of one triple-wise annotation (paper §3.2 and Appendix D.2), as pure functions.

An annotator sees three responses under the letters A, B and C, scores each 0-5 on the scale of
Table 7, labels with ``g``/``b``/``s`` every pair whose scores tie (``g``: the pair's first letter
is better), and writes a final ranking such as ``A>C=B`` that must agree with both: a higher score
ranks higher, and tied scores are ordered as their pair label says. Problem spans carry offsets in
Unicode code points into a response's text (what Python's ``len`` counts, so Chinese and
full-width punctuation count one each).

Everything here works on letters; `cheems.annotate.workflow` maps them to response ids through
the order each annotator was shown.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Mapping

from cheems.records import CheemsInputError, is_integer, ranking_levels

__all__ = ["LETTERS", "MAX_NOTE_CHARS", "Submission", "SubmissionError", "agreement", "check_submission",
           "pair_keys", "relation"]

LETTERS = ("A", "B", "C")
MAX_NOTE_CHARS = 5000
SCORES = range(0, 6)


class SubmissionError(ValueError):
    """A submission that breaks the protocol; ``field`` names the offending part of the body."""

    def __init__(self, field_name: str, message: str):
        self.field = field_name
        self.message = message
        super().__init__(f"{field_name}: {message}")


@dataclass(frozen=True)
class Submission:
    """A checked annotation, in letters: ``pairs`` holds the relation of every pair (from the
    ranking), keyed like ``"AB"``; ``levels`` the ranking's level of each letter (0 = best)."""

    scores: dict[str, int]
    pairs: dict[str, str]
    ranking: str
    levels: dict[str, int]
    spans: list[dict] = field(default_factory=list)
    note: str = ""

    def to_dict(self) -> dict:
        return {"scores": self.scores, "pairs": self.pairs, "ranking": self.ranking, "spans": self.spans,
                "note": self.note}


def pair_keys(letters: tuple[str, ...] | list[str] = LETTERS) -> list[str]:
    """``AB``, ``AC``, ``BC``: every pair once, letters in alphabetical order."""
    return ["".join(p) for p in itertools.combinations(sorted(letters), 2)]


def relation(levels: Mapping[str, int], first: str, second: str) -> str:
    """``g`` when ``first`` ranks above ``second``, ``b`` below, ``s`` level."""
    return "g" if levels[first] < levels[second] else "b" if levels[first] > levels[second] else "s"


def check_submission(body: Any, contents: Mapping[str, str]) -> Submission:
    """Check a submission body against the protocol; ``contents`` maps each letter shown to the
    response's text (for span offsets). Raises SubmissionError naming the first bad field."""
    if not isinstance(body, Mapping):
        raise SubmissionError("body", "must be a JSON object")
    letters = tuple(sorted(contents))
    scores = _scores(body.get("scores"), letters)
    given = _pair_labels(body.get("pairs", {}), letters)
    ranking = body.get("ranking")
    try:
        levels = ranking_levels(list(letters), ranking.replace(" ", "") if isinstance(ranking, str) else ranking)
    except CheemsInputError as e:
        raise SubmissionError("ranking", e.message) from None
    pairs = {}
    for key in pair_keys(letters):
        x, y = key
        by_rank = relation(levels, x, y)
        if scores[x] != scores[y]:
            by_score = "g" if scores[x] > scores[y] else "b"
            if key in given and given[key] != by_score:
                raise SubmissionError(f"pairs.{key}", f"{given[key]!r} contradicts the scores "
                                      f"({x}={scores[x]}, {y}={scores[y]})")
            if by_rank != by_score:
                raise SubmissionError("ranking", f"{ranking!r} contradicts the scores: {x}={scores[x]}, "
                                      f"{y}={scores[y]}")
        else:
            if key not in given:
                raise SubmissionError(f"pairs.{key}", f"{x} and {y} have the same score ({scores[x]}): "
                                      "label the pair g, b or s")
            if by_rank != given[key]:
                raise SubmissionError("ranking", f"{ranking!r} contradicts the pair label {key}={given[key]!r}")
        pairs[key] = by_rank
    spans = _spans(body.get("spans", []), contents)
    note = body.get("note", "")
    if note is None:
        note = ""
    if not isinstance(note, str) or len(note) > MAX_NOTE_CHARS:
        raise SubmissionError("note", f"must be text of at most {MAX_NOTE_CHARS} characters")
    text = ">".join("=".join(x for x in letters if levels[x] == lv) for lv in sorted(set(levels.values())))
    return Submission(scores, pairs, text, levels, spans, note)


def _scores(scores: Any, letters: tuple[str, ...]) -> dict[str, int]:
    if not isinstance(scores, Mapping):
        raise SubmissionError("scores", f"must be an object with a score for each of {', '.join(letters)}")
    unknown = sorted(set(scores) - set(letters))
    if unknown:
        raise SubmissionError(f"scores.{unknown[0]}", f"no response {unknown[0]!r} in this task")
    out = {}
    for x in letters:
        v = scores.get(x)
        if not is_integer(v) or v not in SCORES:
            raise SubmissionError(f"scores.{x}", f"must be an integer from 0 to 5, got {v!r}")
        out[x] = int(v)
    return out


def _pair_labels(pairs: Any, letters: tuple[str, ...]) -> dict[str, str]:
    if pairs is None:
        return {}
    if not isinstance(pairs, Mapping):
        raise SubmissionError("pairs", "must be an object such as {\"AB\": \"g\"}")
    keys = pair_keys(letters)
    out = {}
    for key, label in pairs.items():
        if key not in keys:
            raise SubmissionError(f"pairs.{key}", f"unknown pair (use {', '.join(keys)})")
        if label not in ("g", "b", "s"):
            raise SubmissionError(f"pairs.{key}", f"must be 'g', 'b' or 's', got {label!r}")
        out[key] = label
    return out


def _spans(spans: Any, contents: Mapping[str, str]) -> list[dict]:
    if spans is None:
        return []
    if not isinstance(spans, list) or len(spans) > 200:
        raise SubmissionError("spans", "must be a list of at most 200 spans")
    out = []
    for i, s in enumerate(spans):
        where = f"spans[{i}]"
        if not isinstance(s, Mapping):
            raise SubmissionError(where, "must be an object {key, start, end, note}")
        key = s.get("key")
        if not isinstance(key, str) or key not in contents:
            raise SubmissionError(f"{where}.key", f"no response {key!r} in this task")
        start, end = s.get("start"), s.get("end")
        n = len(contents[key])
        if not is_integer(start) or not is_integer(end) or not 0 <= start < end <= n:
            raise SubmissionError(where, f"start and end must be code-point offsets with 0 <= start < end <= {n}, "
                                  f"got {start!r}, {end!r}")
        note = s.get("note", "")
        if not isinstance(note, str) or len(note) > MAX_NOTE_CHARS:
            raise SubmissionError(f"{where}.note", f"must be text of at most {MAX_NOTE_CHARS} characters")
        out.append({"key": key, "start": int(start), "end": int(end), "note": note,
                    "text": contents[key][int(start):int(end)]})
    return out


def agreement(a: Mapping[str, str], b: Mapping[str, str]) -> float:
    """Share of pairs with the same relation in two annotations of one task (their ``pairs``
    keyed alike): 1.0, 2/3, 1/3 or 0 for a triple."""
    keys = sorted(set(a) & set(b))
    if not keys:
        return 1.0
    return sum(a[k] == b[k] for k in keys) / len(keys)
