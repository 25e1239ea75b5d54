"""The fast paths of cheems.formats (plain responses and comparisons read without a Python
loop) against the careful per-item loop they stand in for, on generated rows, odd ones
included: both give the same Prompt, or the same error with the same field."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cheems.formats.official as formats
from cheems.formats import parse_row
from cheems.records import CheemsInputError

IDS = ["r0", "r1", "r2", "r3"]
odd_values = st.one_of(st.none(), st.integers(-2, 3), st.booleans(), st.lists(st.just("r1"), max_size=1),
                       st.sampled_from(["", "x", "g"]))
ids = st.one_of(st.sampled_from(IDS), st.sampled_from(IDS), odd_values)
labels = st.one_of(st.sampled_from("gbs"), st.sampled_from("gbs"), st.sampled_from(["G", "=", "1", ""]), odd_values)


@st.composite
def responses(draw):
    n = draw(st.integers(1, 4))
    out = []
    for j in range(n):
        kind = draw(st.sampled_from(["plain"] * 6 + ["model", "extra", "no id", "int id", "odd", "text"]))
        r = {"id": IDS[j], "content": f"回答 {j}"}
        if kind == "model":
            r["model"] = draw(st.sampled_from(["m", None, 3]))
        elif kind == "extra":
            r["score"] = 1.5
        elif kind == "no id":
            del r["id"]
        elif kind == "int id":
            r["id"] = j
        elif kind == "odd":
            r[draw(st.sampled_from(["id", "content"]))] = draw(odd_values)
        elif kind == "text":
            r = f"回答 {j}"
        out.append(r)
    if draw(st.booleans()):
        out.append(dict(out[0]) if isinstance(out[0], dict) else out[0])  # a repeated response
    return out


@st.composite
def comparisons(draw):
    out = []
    for _ in range(draw(st.integers(0, 6))):
        c = {"a": draw(ids), "b": draw(ids), "label": draw(labels)}
        kind = draw(st.sampled_from(["plain"] * 6 + ["annotator", "extra", "missing", "not a dict"]))
        if kind == "annotator":
            c["annotator"] = "ann"
        elif kind == "extra":
            c["note"] = [1]
        elif kind == "missing":
            del c[draw(st.sampled_from(["a", "b", "label"]))]
        elif kind == "not a dict":
            c = [c["a"], c.get("b")]
        out.append(c)
    return out


rows = st.fixed_dictionaries({"id": st.just("p1"), "prompt": st.just("问题"), "responses": responses(),
                              "comparisons": comparisons()})


def outcome(row):
    try:
        return parse_row(row)
    except CheemsInputError as e:
        return (str(e), e.field)


@settings(max_examples=400, deadline=None)
@given(rows)
def test_fast_parse_equals_careful_loop(row):
    fast = outcome(row)
    with pytest.MonkeyPatch.context() as mp:  # the careful loop alone, as before the fast paths
        mp.setattr(formats, "_plain_responses", lambda raw: None)
        mp.setattr(formats, "_plain_comparisons", lambda raw, known: None)
        slow = outcome(row)
    assert fast == slow


def test_fast_comparisons_share_the_response_id_strings():
    row = {"id": "p", "prompt": "问题", "responses": [{"id": "r0", "content": "x"}, {"id": "r1", "content": "y"}],
           "comparisons": [{"a": "".join(["r", "0"]), "b": "r1", "label": "g"}]}
    p = parse_row(row)
    assert p.comparisons[0].a is p.responses[0].id
    assert p.comparisons[0].extra == {} and p.comparisons[0].annotator is None
