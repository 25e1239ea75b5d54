"""The data model shared by every stage: prompts, responses, comparisons and rankings.

A prompt row carries its responses, an optional partial ranking (``rank``: response id ->
int, lower is better, equal ints are ties) and optional pairwise ``comparisons``. Benchmarks,
annotations, judge output and training data are all this one shape with different fields
filled, so each stage reads what the previous one wrote.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any, Collection, Hashable, Iterable, Iterator, Mapping, Sequence, TypeVar, Union

import orjson

__all__ = ["LABELS", "ROLES", "UNCATEGORISED", "CheemsInputError", "Comparison", "Message", "Notice", "Prompt",
           "PromptText", "Response", "Setting", "check_chat_message", "check_comparison", "check_comparisons",
           "check_known_response", "check_prompt_text", "check_rank", "identical_responses", "is_integer",
           "is_number", "main_category_of", "preference_pairs", "prompt_id", "prompt_key", "rank_comparisons",
           "ranked_pairs", "ranking_levels", "response_id", "triple_comparisons", "validate_prompt"]

LABELS = ("g", "b", "s")
"""Comparison labels: ``g`` = a is better, ``b`` = b is better, ``s`` = same quality."""

ROLES = ("system", "user", "assistant")

Message = dict  # {"role": ..., "content": ...}
PromptText = Union[str, list]  # plain text, or a list of chat messages


class CheemsInputError(ValueError):
    """Bad input, located by file, line (1-based) and field where known.

    ``str(err)`` is one readable line such as
    ``bench.jsonl:12: responses[3].id: duplicate response id 'r2'``.

    ``remedy`` names the setting that would change the outcome, in the library's own words:
    ``(setting, text)`` where each ``{}`` in ``text`` stands for the setting's name, so that
    ``CheemsInputError("output exists: a.jsonl", remedy=("overwrite", "{} replaces it"))`` reads
    ``output exists: a.jsonl ({} replaces it)`` with ``overwrite`` in Python and ``--overwrite``
    at the command line (:meth:`render` with the CLI's names; the library never names a flag).
    """

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 field: str | None = None, remedy: tuple[str, str] | None = None):
        self.message = message
        self.file = file
        self.line = line
        self.field = field
        self.remedy = remedy
        super().__init__(str(self))

    @classmethod
    def about(cls, setting: str, message: str, **kw) -> "CheemsInputError":
        """A bad value of ``setting``: ``setting: message``, the setting named as :meth:`render` names it."""
        return cls(message, field=Setting(setting), **kw)

    def located(self, *, file: str | None = None, line: int | None = None) -> "CheemsInputError":
        """The same error with file/line filled in where they were unknown."""
        return CheemsInputError(self.message, file=self.file or file,
                                line=self.line if self.line is not None else line, field=self.field,
                                remedy=self.remedy)

    def render(self, name_of=None) -> str:
        """The one line, naming the remedy's setting as ``name_of(setting)`` (the setting's own
        name without ``name_of``; the CLI passes its flag names)."""
        where = ""
        if self.file:
            where = self.file + (f":{self.line}" if self.line is not None else "") + ": "
        elif self.line is not None:
            where = f"line {self.line}: "
        field = name_of(self.field) if name_of and isinstance(self.field, Setting) else self.field
        what = f"{field}: " if field else ""
        tail = ""
        if self.remedy is not None:
            setting, text = self.remedy
            tail = " (" + text.replace("{}", name_of(setting) if name_of else setting) + ")"
        message = self.message.render(name_of or str) if isinstance(self.message, Notice) else self.message
        return f"{where}{what}{message}{tail}"

    def __str__(self) -> str:
        return self.render()


class Setting(str):
    """A setting's name inside a :class:`Notice`: the CLI shows it as its flag."""


class Notice(str):
    """A note for the user (``notify``) in the library's words that names settings: built from
    pieces, each a text or a :class:`Setting`. As a ``str`` it reads with the settings' own
    names (``epochs 3``); :meth:`render` names them another way, as the CLI does with its flags
    (``--epochs 3``)."""

    pieces: tuple[str, ...]

    def __new__(cls, *pieces: str) -> "Notice":
        notice = super().__new__(cls, "".join(pieces))
        notice.pieces = pieces
        return notice

    def render(self, name_of) -> str:
        return "".join(name_of(p) if isinstance(p, Setting) else p for p in self.pieces)


@dataclass(slots=True)
class Response:
    """One response to a prompt: its id, its text and, when known, the model that wrote it."""

    id: str
    content: str
    model: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # other keys of the row, kept as they are

    def to_dict(self) -> dict:
        d = {"id": self.id, "content": self.content}
        if self.model is not None:
            d["model"] = self.model
        for k, v in self.extra.items():
            d.setdefault(k, v)
        return d


@dataclass(slots=True)
class Comparison:
    """One pairwise judgement between responses ``a`` and ``b`` of the same prompt."""

    a: str
    b: str
    label: str  # one of LABELS
    annotator: str | None = None
    source: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # provenance such as a judge's raw reply

    def to_dict(self) -> dict:
        d = {"a": self.a, "b": self.b, "label": self.label}
        if self.annotator is not None:
            d["annotator"] = self.annotator
        if self.source is not None:
            d["source"] = self.source
        for k, v in self.extra.items():
            d.setdefault(k, v)
        return d


@dataclass(slots=True)
class Prompt:
    """A prompt with its responses and whatever judgements are known about them."""

    id: str
    prompt: PromptText
    responses: list[Response]
    rank: dict[str, int] | None = None
    comparisons: list[Comparison] = field(default_factory=list)
    category: list[str] = field(default_factory=list)
    subset: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def main_category(self) -> str:
        return main_category_of(self.category)

    @property
    def prompt_text(self) -> str:
        """The prompt as plain text: the content of every message joined by newlines."""
        if isinstance(self.prompt, str):
            return self.prompt
        return "\n".join(m["content"] for m in self.prompt)

    def response_ids(self) -> list[str]:
        return [r.id for r in self.responses]

    def to_dict(self, *, comparisons: bool = True) -> dict:
        d: dict[str, Any] = {"id": self.id, "prompt": self.prompt,
                             "responses": [r.to_dict() for r in self.responses]}
        if self.rank is not None:
            d["rank"] = self.rank
        if comparisons and self.comparisons:
            d["comparisons"] = [c.to_dict() for c in self.comparisons]
        if self.category:
            d["category"] = self.category
        if self.subset is not None:
            d["subset"] = self.subset
        for k, v in self.extra.items():
            d.setdefault(k, v)
        return d


def is_integer(v: Any) -> bool:
    """An int that is not a bool (``True`` is an int in Python, never a count here)."""
    return isinstance(v, int) and not isinstance(v, bool)


UNCATEGORISED = "未分类"
"""The main category of a prompt whose row gives none."""


def main_category_of(category: Sequence[str] | None) -> str:
    """The main category of a row's ``category`` list: its first entry, else `UNCATEGORISED`."""
    return category[0] if category else UNCATEGORISED


def is_number(v: Any) -> bool:
    """A finite int or float that is not a bool (an int too large for a float is not finite)."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:  # math.isfinite(10**400)
        return False


def response_id(content: str) -> str:
    """Id of a response that has none: the md5 of its content, as the official format does."""
    return hashlib.md5(content.encode("utf-8")).hexdigest()


def prompt_key(prompt: PromptText) -> str | bytes:
    """What makes two prompts one: the text, or the messages as sorted-key JSON, a single user
    message counting as its text (the chat template wraps a plain prompt in one user turn, so
    both encode alike). Bytes for messages, so never equal to a text key."""
    if isinstance(prompt, str):
        return prompt
    if len(prompt) == 1 and prompt[0].get("role") == "user":
        return prompt[0]["content"]
    return orjson.dumps(prompt, option=orjson.OPT_SORT_KEYS)


def prompt_id(prompt: PromptText, contents: Iterable[str] | None = None, *,
              content_ids: Iterable[str] | None = None) -> str:
    """Stable id of a row that has none: 16 hex digits of an md5 over its prompt (text, or
    messages with sorted keys) and, when ``contents`` are given, its responses: the md5 of
    each content (:func:`response_id`), in sorted order.

    With responses, rows that repeat a prompt with other responses (one row per pair, as in
    LLaMA-Factory's DPO files or RewardBench) get distinct ids, while rows holding the same
    prompt and the same responses, in any order, share one. Without, the id names the prompt
    alone (prompt files, which hold no responses). ``content_ids`` may stand for ``contents``
    where those md5s are at hand (readers that derived the response ids from the contents):
    the id is the same, without hashing the texts twice.
    """
    if contents is not None:
        content_ids = [response_id(c) for c in contents]
    if content_ids is not None:
        data = orjson.dumps([prompt, sorted(content_ids)], option=orjson.OPT_SORT_KEYS)
    elif isinstance(prompt, str):
        data = prompt.encode("utf-8")
    else:
        data = orjson.dumps(prompt, option=orjson.OPT_SORT_KEYS)
    return hashlib.md5(data).hexdigest()[:16]


_K = TypeVar("_K", bound=Hashable)  # a response id: str in prompts, int in training data


def _rank_pairs(rank: Mapping[_K, int]) -> Iterator[tuple[_K, _K, bool]]:
    """``(x, y, tied)`` for every pair of a ranking, in the ranking's order: ``x`` is the
    better one of a strict pair; a tie keeps the ranking's order. O(k^2) for k responses."""
    items = list(rank.items())
    for i, (x, rx) in enumerate(items):
        for y, ry in items[i + 1:]:
            if rx < ry:
                yield x, y, False
            elif ry < rx:
                yield y, x, False
            else:
                yield x, y, True


def ranked_pairs(rank: Mapping[_K, int]) -> list[tuple[_K, _K]]:
    """Every (better, worse) pair of a partial ranking (lower rank is better); ties give no pair."""
    return [(x, y) for x, y, tied in _rank_pairs(rank) if not tied]


def rank_comparisons(rank: Mapping[str, int]) -> list[Comparison]:
    """Every pair of a partial ranking as a comparison with ``source="rank"``: ``g`` from the
    better to the worse response, ``s`` between two tied ones (in the ranking's order)."""
    return [Comparison(x, y, "s" if tied else "g", source="rank") for x, y, tied in _rank_pairs(rank)]


def identical_responses(p: Prompt) -> int:
    """How many responses of ``p`` hold the same text as an earlier response of ``p`` (under
    another id). Such twins are kept: a scorer gives them one score, so a ranked pair of them
    is a tie (see :func:`cheems.metrics.evaluate`), and training skips their pair, which
    carries no signal. O(responses)."""
    return len(p.responses) - len({r.content for r in p.responses})


def preference_pairs(p: Prompt, *, distinct: bool = True) -> list[tuple[str, str]]:
    """The (better, worse) response ids a reward model trains on for prompt ``p``.

    A prompt with a ``rank``: its ranking's pairs (:func:`ranked_pairs`; its comparisons are
    ignored). Without one: its ``g`` (``(a, b)``) and ``b`` (``(b, a)``) comparisons in order;
    ties ``s`` give no pair. With ``distinct`` a pair judged the same way more than once
    counts once (first occurrence kept); ``distinct=False`` keeps every judgement.
    """
    if p.rank is not None:
        return ranked_pairs(p.rank)
    pairs = [(c.a, c.b) if c.label == "g" else (c.b, c.a) for c in p.comparisons if c.label in ("g", "b")]
    return list(dict.fromkeys(pairs)) if distinct else pairs


def check_prompt_text(prompt: Any) -> None:
    """Raise CheemsInputError unless ``prompt`` is non-empty text or a non-empty list of chat
    messages, each with a known role and string content."""
    if isinstance(prompt, str):
        if not prompt.strip():
            raise CheemsInputError("prompt is empty", field="prompt")
        return
    if not isinstance(prompt, list):
        raise CheemsInputError("prompt must be a string or a list of chat messages", field="prompt")
    if not prompt:
        raise CheemsInputError("prompt has no messages", field="prompt")
    for i, m in enumerate(prompt):
        check_chat_message(m, field=f"prompt[{i}]")


def check_chat_message(m: Any, *, field: str) -> None:
    """Raise CheemsInputError at ``field`` unless ``m`` is ``{role, content}`` with a known role
    and string content."""
    if not isinstance(m, dict) or not isinstance(m.get("content"), str):
        raise CheemsInputError("a message must be an object with a string 'content'", field=field)
    if m.get("role") not in ROLES:
        raise CheemsInputError(f"role must be one of {', '.join(ROLES)}, got {m.get('role')!r}", field=f"{field}.role")


def check_known_response(rid: Any, known: Collection[str], *, field: str, subject: str = "") -> None:
    """Raise CheemsInputError ``"{subject}names unknown response 'x'"`` at ``field`` unless
    ``rid`` is one of the ``known`` response ids."""
    if rid not in known:
        raise CheemsInputError(f"{subject}names unknown response {rid!r}", field=field)


def check_comparison(a: Any, b: Any, label: Any, known: Collection[str], *, field: str, lead: str = "",
                     subject: str = "comparison ", itself: bool = True) -> None:
    """Raise CheemsInputError unless ``label`` is one of LABELS and ``a`` and ``b`` name
    ``known`` responses (two different ones, unless ``itself`` is False).

    ``field`` locates the comparison (``"comparisons[3]"``); the error names its ``.label``,
    ``.a`` or ``.b``, or the comparison itself for a response compared with itself. ``lead``
    starts every message (``"prompt 'p1': "``); ``subject`` is what names an unknown response
    in the message (``"comparison names unknown response 'r9'"``), after ``lead``.
    """
    if label not in LABELS:
        raise CheemsInputError(f"{lead}label must be one of g, b, s, got {label!r}", field=f"{field}.label")
    check_known_response(a, known, field=f"{field}.a", subject=lead + subject)
    check_known_response(b, known, field=f"{field}.b", subject=lead + subject)
    if itself and a == b:
        raise CheemsInputError(f"{lead}comparison of response {a!r} with itself", field=field)


def check_comparisons(p: Prompt) -> None:
    """Raise CheemsInputError for the first comparison of ``p`` with an unknown label or
    response, the message naming the prompt (prompts built in code skip the reader's checks).
    A response compared with itself passes here (:func:`validate_prompt` refuses it)."""
    known = set(p.response_ids())
    for k, c in enumerate(p.comparisons):
        check_comparison(c.a, c.b, c.label, known, field=f"comparisons[{k}]", lead=f"prompt {p.id!r}: ",
                         itself=False)


def check_rank(rank: Mapping[str, Any], known: Collection[str], *, lead: str = "") -> None:
    """Raise CheemsInputError (field ``rank``, messages starting with ``lead``) for the first
    entry of ``rank`` that names an unknown response or holds no integer."""
    for rid, v in rank.items():
        check_known_response(rid, known, field="rank", subject=f"{lead}rank ")
        if not is_integer(v):
            raise CheemsInputError(f"{lead}rank of {rid!r} must be an integer, got {v!r}", field="rank")


def validate_prompt(p: Prompt, *, require_rank: bool = False, comparisons: bool = True) -> None:
    """Check one prompt's internal consistency; raise CheemsInputError naming the field.

    Checks: a non-empty prompt, at least one response, unique response ids, string contents,
    ranks that are integers and cover exactly the responses, comparisons naming known
    responses (and two different ones) with a label in g/b/s (skipped with
    ``comparisons=False`` when the reader has already checked them).
    """
    check_prompt_text(p.prompt)
    if not p.responses:
        raise CheemsInputError("response list is empty", field="responses")
    seen: dict[str, int] = {}
    for i, r in enumerate(p.responses):
        if not isinstance(r.content, str):
            raise CheemsInputError("content must be a string", field=f"responses[{i}].content")
        j = seen.setdefault(r.id, i)
        if j != i:
            if r.id == response_id(r.content):  # an id made from the content: say so plainly
                raise CheemsInputError(f"duplicate response id: the content repeats responses[{j}]",
                                       field=f"responses[{i}]")
            raise CheemsInputError(f"duplicate response id {r.id!r}", field=f"responses[{i}].id")
    if p.rank is not None:
        check_rank(p.rank, seen)
        missing = [rid for rid in seen if rid not in p.rank]
        if missing:
            raise CheemsInputError(f"ranks missing for {len(missing)} response(s): {', '.join(map(repr, missing[:5]))}",
                                   field="rank")
    elif require_rank:
        raise CheemsInputError("no 'rank' (run `cheems rank` on annotations first)", field="rank")
    for i, c in enumerate(p.comparisons if comparisons else ()):
        check_comparison(c.a, c.b, c.label, seen, field=f"comparisons[{i}]")


def ranking_levels(ids: list[str], ranking: str, *, field_name: str = "ranking") -> dict[str, int]:
    """The level of each of ``ids`` in a ranking such as ``x>z=y`` (0 = best; ``=`` joins
    responses of one level). The ranking must name each of ``ids`` exactly once."""
    if not isinstance(ranking, str) or not ranking.strip():
        raise CheemsInputError("ranking must be a string such as 'x>z=y'", field=field_name)
    levels = [[t.strip() for t in group.split("=")] for group in ranking.split(">")]
    named = [t for group in levels for t in group]
    if any(not t for t in named):
        raise CheemsInputError(f"malformed ranking {ranking!r}", field=field_name)
    if sorted(named) != sorted(ids) or len(set(named)) != len(named):
        raise CheemsInputError(f"ranking {ranking!r} must name each of {ids} exactly once",
                               field=field_name)
    return {t: i for i, group in enumerate(levels) for t in group}


def triple_comparisons(ids: list[str], ranking: str, *, annotator: str | None = None,
                       field_name: str = "ranking") -> list[Comparison]:
    """Expand one triple-wise result such as ``x>z=y`` into its three pairwise comparisons.

    ``>`` separates better from worse, ``=`` joins responses of the same quality; the ranking
    must name each of the triple's ``ids`` exactly once.
    """
    level = ranking_levels(ids, ranking, field_name=field_name)
    out = []
    for i, x in enumerate(ids):
        for y in ids[i + 1:]:
            label = "g" if level[x] < level[y] else "b" if level[x] > level[y] else "s"
            out.append(Comparison(x, y, label, annotator=annotator, source="triple"))
    return out
