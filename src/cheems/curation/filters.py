"""Rule-based response filters: remove bad sampled responses before the LLM judge (paper §4).

Responses to each prompt are sampled from many LLMs. Before a judge compares every pair,
cheap rules remove responses that are not worth a comparison: empty, garbled, looping,
mostly not Chinese, cut off, far too long, or copies of another response of the same
prompt. The rules aim at high recall on such defects while keeping normal Chinese answers,
answers with code blocks, LaTeX math, short numeric answers and English technical terms.

Rules, in the order they are checked (a removed response gets the FIRST rule that fires, so
each removed response has exactly one reason; the most specific defect comes first):

1. ``empty``          fewer than ``min_chars`` characters that are neither whitespace nor
                      zero-width (:func:`visible_chars`).
2. ``garbled``        more than ``max_replacement_chars`` U+FFFD replacement characters, more
                      than ``max_control_chars`` control / private-use / surrogate code points
                      (see :data:`GARBLED_CHARS`), or more than ``max_mojibake_sequences``
                      UTF-8-read-as-Latin-1 sequences such as ``Ã©`` or ``â€œ``.
3. ``repetition``     repeated ``ngram_size``-character n-grams (each occurring at least
                      ``min_repeats`` times) cover more than ``max_repeated_ngram_share`` of
                      the prose (:func:`repetition_text`: code blocks, whitespace and
                      markdown markup left out; :func:`repeated_ngram_share`), or one line /
                      sentence of at least ``repeated_line_min_chars`` characters of prose
                      occurs more than ``max_line_repeats`` times (:func:`most_repeated_line`).
4. ``non_chinese``    the share of non-Chinese letters among Han characters and letters
                      (:func:`non_chinese_ratio`; code, formulas and web addresses left out)
                      exceeds ``max_non_chinese_ratio``; only judged when the text has at
                      least ``min_chars_for_ratio`` such characters.
5. ``truncated``      ``extra["finish_reason"] == "length"`` (the sampler records it), or, with
                      ``detect_truncation_heuristics``, an unclosed ````` / ``~~~`` code fence
                      or an unclosed ``$$`` display formula (see :func:`truncation_signal`).
6. ``too_long``       more than ``max_chars`` characters.
7. ``length_outlier`` at least ``outlier_min_chars`` characters and longer than
                      ``length_outlier_ratio`` times the median length of the prompt's other
                      non-blank responses; judged only when there are at least 2 of those.
8. ``duplicate``      the same text as an earlier kept response once all whitespace is removed
                      (:func:`without_whitespace`: line breaks and spacing do not matter).
9. ``near_duplicate`` Jaccard similarity of character ``shingle_size``-gram sets at least
                      ``near_duplicate_threshold`` with an earlier kept response.

Rules 1-7 look at one response (and its prompt); 8-9 run afterwards, in response order, among
the responses that passed 1-7, so the first of a group of copies is kept.

Prompt-aware exemptions (``prompt_aware=True``; a chat prompt is judged by its user messages):
when the prompt itself is mostly not Chinese (its own non-Chinese ratio exceeds
``max_non_chinese_ratio``) or names another language or a translation (one of
``foreign_language_markers``, case-insensitive), the ``non_chinese`` rule is skipped for its
responses; a garbling signal that the prompt itself contains (a U+FFFD, a control character,
a mojibake sequence) is not held against its responses.

Defaults were checked on 1,598 real Chinese responses (public DPO-En-Zh preference pairs):
20-character n-grams flag 5 responses where 10-character ones flagged 26, mostly ordinary
answers that repeat a name or quote a sentence; a non-Chinese letter ratio above 0.7 flags
5 where 0.5 flagged 14, mostly answers full of product names, citations and API names (a
Latin word has several letters where its Chinese counterpart has two characters, so 0.7 of
letters is about half of the content in English). The 15 ``garbled`` ones hold real U+FFFD.

Accounting: a prompt left with fewer than ``min_responses`` responses is removed. It gets one
prompt record (``rule="too_few_responses"``, ``response_id=None``) and each of its responses
that passed the rules gets a response record with the same rule, so that always
``input responses == kept responses + response records`` (see :meth:`FilterResult.report`).

The measures the rules apply live in `cheems.curation.text_measures` and the near-duplicate
join in `cheems.curation.near_duplicates`; the public ones are importable from here as well.

Cost: every response rule is linear in the response length (compiled regexes and C-level
str methods). Repeated n-grams are screened in bulk with numpy on 64-bit hashes of the windows
for a batch of prompts at once (:func:`repetition_screen`: a screened share is an upper bound;
only a text whose bound passes the threshold is measured exactly with
:func:`repeated_ngram_share`). The length outlier reads the median of the others off the
prompt's sorted lengths (O(log k)). Exact copies are a dict lookup; near duplicates use the
prefix filter of exact set-similarity joins on exact shingle ids (:func:`later_copies`): a
response meets only the kept responses that share one of its rarest shingles, and each such
candidate is confirmed on the exact sets, so the result is that of comparing every pair without
comparing them. One prompt with 10,000 responses of 50-800 characters takes about 2 s where
comparing all pairs took minutes (``benchmarks/bench_big_prompt.py``). Measured: 100k responses
of about 500 characters in about 20 s on one core of a small shared virtual machine (plain
``sum(range(10**6))`` takes 40 ms there), most of it in the per-response regexes.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable

import numpy as np

from cheems.curation.near_duplicates import ShingleSets, jaccard, later_copies, shingle_sets, shingles
from cheems.curation.text_measures import (GARBLED_CHARS, GARBLING_HINT, HAN_RANGES, MOJIBAKE, NEUTRAL_LETTER_RANGES,
                                           Fences, code_fences, han_count, most_repeated_line, non_chinese_ratio,
                                           repeated_ngram_share, repetition_screen, repetition_text, script_counts,
                                           strip_code_and_formulas, text_length, truncation_signal, visible_chars,
                                           without_whitespace)
from cheems.io import gc_paused
from cheems.records import CheemsInputError, Prompt, Response
from cheems.settings import check_settings, setting

# the measures and the join below are re-exported: callers import them from this module too
__all__ = ["BATCH_CHARS", "BATCH_PROMPTS", "FOREIGN_LANGUAGE_MARKERS", "GARBLED_CHARS", "HAN_RANGES", "MOJIBAKE",
           "NEUTRAL_LETTER_RANGES", "PROMPT_RULE", "RULES", "FilterConfig", "FilterResult", "filter_prompt",
           "filter_prompts", "han_count", "jaccard", "most_repeated_line", "non_chinese_ratio", "repeated_ngram_share",
           "repetition_text", "script_counts", "shingles", "strip_code_and_formulas", "text_length",
           "truncation_signal", "visible_chars", "without_whitespace"]

RULES = ("empty", "garbled", "repetition", "non_chinese", "truncated", "too_long",
         "length_outlier", "duplicate", "near_duplicate")
"""Response rules in the order they are checked; the first that fires names the removal."""

PROMPT_RULE = "too_few_responses"
"""Rule of a prompt removed for keeping fewer than ``min_responses`` responses."""

FOREIGN_LANGUAGE_MARKERS = ("英文", "英语", "翻译", "译成", "外语", "日语", "日文", "韩语", "韩文",
                            "法语", "德语", "俄语", "西班牙语", "english", "translat")
"""Words in a prompt that ask for another language; see ``FilterConfig.prompt_aware``."""

# ----------------------------------------------------------------------------- config

@dataclass
class FilterConfig:
    """Every threshold of the response filters; the fields are the CLI flags.

    See the module docstring for what each rule does with them. Lengths are in characters
    (Unicode code points); "more than X" thresholds fire strictly above X.
    """

    rules: tuple[str, ...] = setting(RULES, choices=RULES, choice_name="rule", help="Enabled rules, names from RULES")
    # empty
    min_chars: int = setting(1, min=1, help="Fewer visible characters than this: empty")
    # garbled (each a count that may not be exceeded)
    max_replacement_chars: int = setting(0, min=0, help="U+FFFD replacement characters a response may hold")
    max_control_chars: int = setting(0, min=0, help="GARBLED_CHARS (controls, private use, surrogates) "
                                                    "a response may hold")
    max_mojibake_sequences: int = setting(1, min=0, help='MOJIBAKE matches such as "Ã©", "â€œ" a response '
                                                         "may hold")
    # repetition
    ngram_size: int = setting(20, min=2, help="n of the repeated n-grams")
    min_repeats: int = setting(3, min=2, help="An n-gram repeats when it occurs this often")
    max_repeated_ngram_share: float = setting(0.3, gt=0, max=1, help="Share of the prose repeated n-grams "
                                                                     "may cover")
    repeated_line_min_chars: int = setting(20, min=1, help="Shorter lines / sentences are not counted")
    max_line_repeats: int = setting(4, min=1, help="Occurrences one line / sentence may have")
    # non_chinese
    max_non_chinese_ratio: float = setting(0.7, min=0, max=1, help="Largest share of non-Chinese letters, "
                                                                   "outside code, formulas and URLs")
    min_chars_for_ratio: int = setting(20, min=0, help="Fewer letters than this: the ratio is not judged")
    exempt_code: bool = setting(True, help="Code blocks and inline code do not count")
    exempt_formulas: bool = setting(True, help="LaTeX formulas do not count")
    exempt_urls: bool = setting(True, help="Web and e-mail addresses do not count")
    prompt_aware: bool = setting(True, help="Exemptions for prompts in / asking for other languages")
    foreign_language_markers: tuple[str, ...] = setting(FOREIGN_LANGUAGE_MARKERS, help="Words in a prompt that "
                                                        "ask for another language (with prompt_aware)")
    # truncated
    detect_truncation_heuristics: bool = setting(True, help="Unclosed code fence / $$ count as truncation, "
                                                            "besides finish_reason")
    # too_long / length_outlier
    max_chars: int = setting(8000, min=1, help="Absolute length cap in characters")
    length_outlier_ratio: float = setting(4.0, gt=1, help="Times the median length of the other responses")
    outlier_min_chars: int = setting(1500, min=0, help="Shorter responses are never outliers")
    # duplicate / near_duplicate
    near_duplicate_threshold: float = setting(0.9, gt=0, max=1, help="Jaccard similarity of shingle sets")
    shingle_size: int = setting(5, min=1, help="Characters per shingle")
    # prompts
    min_responses: int = setting(2, min=1, help="A prompt keeping fewer responses is removed")

    def validate(self) -> "FilterConfig":
        """Check every field (:func:`cheems.settings.check_settings`: types, ranges, rule names),
        then that the markers are non-empty; raise CheemsInputError
        naming the first bad field. Returns self."""
        check_settings(self)
        if not all(self.foreign_language_markers):
            raise CheemsInputError(f"must be a list of non-empty strings, got {self.foreign_language_markers!r}",
                                   field="foreign_language_markers")
        return self


# ----------------------------------------------------------------------------- filtering

def _asked(prompt: Prompt) -> str:
    """The text the prompt-aware exemptions look at: a plain prompt, or the user messages of
    a chat (an English system message says nothing about the language asked for)."""
    if isinstance(prompt.prompt, str):
        return prompt.prompt
    return "\n".join(m["content"] for m in prompt.prompt if m.get("role") == "user")


@dataclass
class _PromptContext:
    """What the rules need to know about a prompt, computed once per prompt."""

    skip_language: bool     # prompt_aware: the prompt asks for or is in another language
    prompt_fffd: bool       # prompt_aware: the prompt itself holds these garbling signals
    prompt_control: bool
    prompt_mojibake: bool
    lengths: list[int]      # len(content) of every response
    nonblank: list[bool]    # whether each response has non-whitespace content
    nonblank_sorted: list[int]  # the lengths of the non-blank responses, sorted


def _context(prompt: Prompt, config: FilterConfig) -> _PromptContext:
    text = _asked(prompt)
    aware = config.prompt_aware
    skip_language = False
    if aware:
        lowered = text.lower()
        skip_language = (any(m.lower() in lowered for m in config.foreign_language_markers)
                         or non_chinese_ratio(text, config.exempt_code, config.exempt_formulas,
                                              config.exempt_urls) > config.max_non_chinese_ratio)
    contents = [r.content for r in prompt.responses]
    lengths = [len(c) for c in contents]
    nonblank = [c != "" and not c.isspace() for c in contents]
    return _PromptContext(
        skip_language=skip_language,
        prompt_fffd=aware and "\ufffd" in text,
        prompt_control=aware and GARBLED_CHARS.search(text) is not None,
        prompt_mojibake=aware and MOJIBAKE.search(text) is not None,
        lengths=lengths, nonblank=nonblank,
        nonblank_sorted=sorted(n for n, keep in zip(lengths, nonblank) if keep))


def _median_of_others(i: int, ctx: _PromptContext) -> int | float | None:
    """``statistics.median`` of the lengths of the non-blank responses other than ``i`` (None
    when fewer than 2), read off the sorted lengths without building the list: O(log k)."""
    data = ctx.nonblank_sorted
    skip = bisect_left(data, ctx.lengths[i]) if ctx.nonblank[i] else len(data)  # one copy of i's
    n = len(data) - ctx.nonblank[i]
    if n < 2:
        return None

    def at(q: int) -> int:  # element q of data without position skip
        return data[q] if q < skip else data[q + 1]

    if n % 2:
        return at(n // 2)
    return (at(n // 2 - 1) + at(n // 2)) / 2


def _first_rule(i: int, r: Response, fences: Fences, prose: str,
                bound: float, most: int, ctx: _PromptContext, config: FilterConfig,
                enabled: frozenset) -> tuple[str, str] | None:
    """(rule, detail) of the first of rules 1-7 that removes response ``i``, or None.

    ``fences`` is :func:`code_fences` of the response, ``prose`` its :func:`repetition_text`,
    ``bound`` and ``most`` the screened repetition share and largest n-gram count of the
    prose (:func:`repetition_screen`). A line repeated c times puts its first n-gram c
    times in the prose, so the line check is skipped when ``most`` shows no n-gram occurs
    often enough (for lines at least ``ngram_size`` long).
    """
    text = r.content
    if "empty" in enabled:
        n = visible_chars(text)
        if n < config.min_chars:
            return "empty", ("blank" if not n else
                             f"{n} visible character(s) < min_chars {config.min_chars}")
    if "garbled" in enabled and GARBLING_HINT.search(text):
        why = _garbled(text, ctx, config)
        if why:
            return "garbled", why
    if "repetition" in enabled:
        if bound > config.max_repeated_ngram_share:
            share = repeated_ngram_share(prose, config.ngram_size, config.min_repeats)
            if share > config.max_repeated_ngram_share:
                return "repetition", (f"repeated {config.ngram_size}-grams cover {share:.0%} of "
                                      f"the prose (max {config.max_repeated_ngram_share:.0%})")
        if most > config.max_line_repeats or config.repeated_line_min_chars < config.ngram_size:
            unit, c = most_repeated_line(text, config.repeated_line_min_chars, fences)
            if c > config.max_line_repeats:
                shown = unit if len(unit) <= 30 else unit[:30] + "…"
                return "repetition", f"line repeated {c} times: {shown!r}"
    if "non_chinese" in enabled and not ctx.skip_language:
        han, other = script_counts(strip_code_and_formulas(text, config.exempt_code, config.exempt_formulas,
                                                           config.exempt_urls, fences))
        if han + other >= max(config.min_chars_for_ratio, 1):
            ratio = other / (han + other)
            if ratio > config.max_non_chinese_ratio:
                return "non_chinese", (f"non-Chinese letter ratio {ratio:.2f} > "
                                       f"{config.max_non_chinese_ratio:.2f}")
    if "truncated" in enabled:
        if r.extra.get("finish_reason") == "length":
            return "truncated", "finish_reason=length"
        if config.detect_truncation_heuristics:
            why = truncation_signal(text, fences)
            if why:
                return "truncated", why
    length = ctx.lengths[i]
    if "too_long" in enabled and length > config.max_chars:
        return "too_long", f"{length} characters > max_chars {config.max_chars}"
    if "length_outlier" in enabled and length >= config.outlier_min_chars:
        median = _median_of_others(i, ctx)
        if median is not None and length > config.length_outlier_ratio * median:
            return "length_outlier", (f"{length} characters > {config.length_outlier_ratio:g} "
                                      f"x median {median:g} of the other responses")
    return None


def _garbled(text: str, ctx: _PromptContext, config: FilterConfig) -> str | None:
    """The detail of the ``garbled`` rule for a text with some garbling character, or None."""
    if not ctx.prompt_fffd:
        n = text.count("\ufffd")
        if n > config.max_replacement_chars:
            return f"{n} U+FFFD replacement character(s)"
    if not ctx.prompt_control and GARBLED_CHARS.search(text):
        n = len(GARBLED_CHARS.findall(text))
        if n > config.max_control_chars:
            return f"{n} control / private-use character(s)"
    if not ctx.prompt_mojibake and MOJIBAKE.search(text):
        found = MOJIBAKE.findall(text)
        if len(found) > config.max_mojibake_sequences:
            return f"{len(found)} mojibake sequence(s) such as {found[0]!r}"
    return None


def _duplicates(responses: list[Response], flats: list[str], sets: ShingleSets | None, first: int,
                config: FilterConfig, enabled: frozenset) -> dict[int, tuple[str, str]]:
    """Later copies among ``responses`` (index -> (rule, detail)); the first copy stays.

    ``flats`` are the responses without whitespace and ``sets`` their shingle sets as texts
    ``first``, ``first + 1``, ... (:func:`shingle_sets`); :func:`later_copies` finds, for each
    response, the earlier kept one it copies: the same text (``duplicate``) or shingle Jaccard
    similarity at least ``near_duplicate_threshold`` (``near_duplicate``).
    """
    exact, near = "duplicate" in enabled, "near_duplicate" in enabled
    out: dict[int, tuple[str, str]] = {}
    if not (exact or near) or len(responses) < 2:
        return out
    k = config.shingle_size
    for i, (j, sim) in later_copies(flats, sets, first, k, config.near_duplicate_threshold, exact, near).items():
        if sim is None:
            out[i] = ("duplicate", f"same text as response {responses[j].id!r}")
        else:
            out[i] = ("near_duplicate", f"near duplicate of response {responses[j].id!r} "
                                        f"(Jaccard {sim:.2f} of {k}-character shingles)")
    return out


def _record(prompt: Prompt, r: Response | None, rule: str, detail: str) -> dict:
    return {"prompt_id": prompt.id, "response_id": None if r is None else r.id,
            "model": None if r is None else r.model, "rule": rule, "detail": detail}


def _filter_batch(prompts: list[Prompt], config: FilterConfig,
                  enabled: frozenset) -> list[tuple[Prompt | None, list[dict]]]:
    """:func:`filter_prompt` for each of a few prompts, with a validated config: rules 1-7 per
    response, then duplicates among each prompt's survivors, then the prompt's fate. The
    hashed screens run once for the whole batch."""
    contents = [r.content for p in prompts for r in p.responses]
    fences = [code_fences(c) for c in contents]
    if "repetition" in enabled:
        proses = [repetition_text(c, f) for c, f in zip(contents, fences)]
        bounds, most = repetition_screen(proses, config.ngram_size, config.min_repeats)
    else:
        proses = contents
        bounds, most = np.zeros(len(contents)), np.zeros(len(contents), np.int64)
    hits: list[dict[int, tuple[str, str]]] = []  # per prompt: response index -> (rule, detail)
    passed: list[list[int]] = []                  # per prompt: indices that passed rules 1-7
    at = 0
    for p in prompts:
        ctx = _context(p, config)
        hits.append({})
        passed.append([])
        for i, r in enumerate(p.responses):
            hit = _first_rule(i, r, fences[at + i], proses[at + i], bounds[at + i],
                              int(most[at + i]), ctx, config, enabled)
            if hit:
                hits[-1][i] = hit
            else:
                passed[-1].append(i)
        at += len(p.responses)
    starts = np.cumsum([0] + [len(p.responses) for p in prompts])
    survivors = [[without_whitespace(contents[starts[n] + i]) for i in ids]
                 for n, ids in enumerate(passed)]
    sets = None
    if "near_duplicate" in enabled:
        sets = shingle_sets([f for group in survivors for f in group], config.shingle_size,
                             config.near_duplicate_threshold)
    out = []
    first = 0  # the prompt's first survivor among the texts of sets
    for n, p in enumerate(prompts):
        dups = _duplicates([p.responses[i] for i in passed[n]], survivors[n], sets, first, config,
                           enabled)
        first += len(survivors[n])
        for j, hit in dups.items():
            hits[n][passed[n][j]] = hit
        out.append(_assemble(p, hits[n], config))
    return out


def _assemble(prompt: Prompt, hits: dict[int, tuple[str, str]],
              config: FilterConfig) -> tuple[Prompt | None, list[dict]]:
    """The kept prompt (or None) and the removal records, given each removed response's rule."""
    kept = [r for i, r in enumerate(prompt.responses) if i not in hits]
    if len(kept) < config.min_responses:
        detail = f"{len(kept)} response(s) left, min_responses is {config.min_responses}"
        records = [_record(prompt, r, *hits[i]) if i in hits else
                   _record(prompt, r, PROMPT_RULE, "prompt removed: " + detail)
                   for i, r in enumerate(prompt.responses)]
        records.append(_record(prompt, None, PROMPT_RULE, detail))
        return None, records
    records = [_record(prompt, prompt.responses[i], *hits[i]) for i in sorted(hits)]
    ids = {r.id for r in kept}
    rank = None if prompt.rank is None else {k: v for k, v in prompt.rank.items() if k in ids}
    comparisons = [c for c in prompt.comparisons if c.a in ids and c.b in ids]
    out = replace(prompt, responses=kept, rank=rank, comparisons=comparisons,
                  category=list(prompt.category), extra=dict(prompt.extra))
    return out, records


def filter_prompt(prompt: Prompt,
                  config: FilterConfig | None = None) -> tuple[Prompt | None, list[dict]]:
    """Apply the rules to one prompt's responses.

    Returns ``(kept_prompt, records)``. ``kept_prompt`` is a new Prompt (the input is not
    changed) holding the kept responses in their original order, its ``rank`` restricted to
    them (values unchanged) and only the comparisons between two kept responses; it is None
    when fewer than ``config.min_responses`` responses are kept. ``records`` holds one dict
    ``{"prompt_id", "response_id", "model", "rule", "detail"}`` per removed response, in
    response order; a removed prompt adds a record for each of its remaining responses and
    one with ``response_id=None`` (see the module docstring for the accounting).
    """
    config = (config or FilterConfig()).validate()
    return _filter_batch([prompt], config, frozenset(config.rules))[0]


@dataclass
class FilterResult:
    """Output of :func:`filter_prompts`: kept prompts, every removal record, input counts."""

    kept: list[Prompt]
    removed: list[dict]
    input_prompts: int = 0
    input_responses: int = 0
    input_by_model: dict[str, int] = field(default_factory=dict)

    def report(self) -> dict:
        """Counts that add up.

        ``removed_responses`` counts the response records (``response_id`` set), including the
        responses of removed prompts under ``too_few_responses``, so
        ``input_responses == kept_responses + removed_responses`` always holds; ``balanced``
        states it. ``removed_by_rule`` counts response records per rule (every rule listed, in
        check order); ``prompts_removed`` counts prompt records. ``by_model`` gives each model
        (``"unknown"`` when a response names none) its input, kept and removed counts and its
        removals per rule.
        """
        def model_row(name: str) -> dict:
            return by_model.setdefault(name, {"input": 0, "kept": 0, "removed": 0,
                                              "removed_by_rule": {}})

        by_rule = {rule: 0 for rule in (*RULES, PROMPT_RULE)}
        by_model: dict[str, dict] = {}
        for name, n in self.input_by_model.items():
            model_row(name)["input"] = n
        removed = prompts_removed = 0
        for rec in self.removed:
            if rec["response_id"] is None:
                prompts_removed += 1
                continue
            removed += 1
            by_rule[rec["rule"]] += 1
            row = model_row(_model_key(rec["model"]))
            row["removed"] += 1
            row["removed_by_rule"][rec["rule"]] = row["removed_by_rule"].get(rec["rule"], 0) + 1
        kept = 0
        for p in self.kept:
            kept += len(p.responses)
            for r in p.responses:
                model_row(_model_key(r.model))["kept"] += 1
        return {
            "input_prompts": self.input_prompts,
            "input_responses": self.input_responses,
            "kept_prompts": len(self.kept),
            "kept_responses": kept,
            "removed_responses": removed,
            "removed_by_rule": by_rule,
            "prompts_removed": prompts_removed,
            "by_model": dict(sorted(by_model.items())),
            "invariant": "input_responses == kept_responses + removed_responses",
            "balanced": self.input_responses == kept + removed,
        }


def _model_key(model: str | None) -> str:
    return "unknown" if model is None else model


BATCH_CHARS = 65536
BATCH_PROMPTS = 1024
"""At most this many prompts and (about) this many response characters are screened
together by :func:`filter_prompts`: large enough to spread numpy's per-call cost, small
enough to keep memory and sort cost low."""


def filter_prompts(prompts: Iterable[Prompt], config: FilterConfig | None = None,
                   progress: Callable[[int, int], None] | None = None) -> FilterResult:
    """Filter the responses of every prompt (:func:`filter_prompt`) and count what happened.

    The config is validated once, here. ``progress(done, total)`` is called after each batch
    of prompts (about :data:`BATCH_CHARS` characters of responses) and once at the end.
    """
    config = (config or FilterConfig()).validate()
    enabled = frozenset(config.rules)
    prompts = list(prompts)
    result = FilterResult(kept=[], removed=[], input_prompts=len(prompts))
    by_model: Counter = Counter()
    batch: list[Prompt] = []
    chars = done = 0
    with gc_paused():  # many small long-lived objects and no cycles
        for n, p in enumerate(prompts, 1):
            batch.append(p)
            chars += sum(len(r.content) for r in p.responses)
            if chars < BATCH_CHARS and len(batch) < BATCH_PROMPTS and n < len(prompts):
                continue
            for q, (kept, records) in zip(batch, _filter_batch(batch, config, enabled)):
                result.input_responses += len(q.responses)
                by_model.update(_model_key(r.model) for r in q.responses)
                if kept is not None:
                    result.kept.append(kept)
                result.removed.extend(records)
            done += len(batch)
            batch, chars = [], 0
            if progress:
                progress(done, len(prompts))
    result.input_by_model = dict(by_model)
    return result
