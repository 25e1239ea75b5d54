"""The dashboard's Krippendorff's alpha against a plain coincidence-matrix reference, and the
cases where the package raises (every value the same) or nothing is comparable yet."""

from __future__ import annotations

import itertools
from collections import Counter

from hypothesis import given, settings, strategies as st

from cheems.annotate.dashboard import krippendorff_alpha


def reference_nominal_alpha(units: dict) -> float:
    """Krippendorff's alpha for nominal data written out: the coincidence matrix o_ck counts, in
    each unit with m_u >= 2 values, every ordered pair of values from different coders weighted
    1/(m_u - 1); alpha = 1 - (n - 1) * sum_{c != k} o_ck / sum_{c != k} n_c n_k."""
    o: Counter = Counter()
    for values in units.values():
        vals = list(values.values())
        m = len(vals)
        if m < 2:
            continue
        for i, j in itertools.permutations(range(m), 2):
            o[(vals[i], vals[j])] += 1 / (m - 1)
    n_c: Counter = Counter()
    for (c, _), w in o.items():
        n_c[c] += w
    n = sum(n_c.values())
    observed = sum(w for (c, k), w in o.items() if c != k)
    expected = sum(n_c[c] * n_c[k] for c in n_c for k in n_c if c != k)
    return 1 - (n - 1) * observed / expected


units_strategy = st.dictionaries(
    st.integers(0, 40),
    st.dictionaries(st.sampled_from(["甲", "乙", "丙"]), st.integers(0, 2), min_size=1, max_size=3),
    min_size=1, max_size=25)


@settings(max_examples=200, deadline=None)
@given(units_strategy)
def test_nominal_alpha_matches_the_plain_formula(units):
    got = krippendorff_alpha(units, "nominal")
    usable = {u: v for u, v in units.items() if len(v) >= 2}
    values = {x for v in usable.values() for x in v.values()}
    if not usable:
        assert got["value"] is None and "two answers" in got["note"]
    elif len(values) == 1:
        assert got["value"] is None and "same value" in got["note"]
    else:
        assert abs(got["value"] - reference_nominal_alpha(usable)) < 1e-9


def test_every_value_agreeing_is_reported_not_raised():
    units = {u: {"甲": 3, "乙": 3} for u in range(5)}
    for level in ("ordinal", "nominal"):
        got = krippendorff_alpha(units, level)
        assert got["value"] is None and got["units"] == 5 and "undefined" in got["note"]


def test_ordinal_alpha_is_one_for_perfect_agreement_and_lower_with_disagreement():
    same = {u: {"甲": u % 6, "乙": u % 6} for u in range(12)}
    assert krippendorff_alpha(same, "ordinal")["value"] == 1.0
    near = {**same, 20: {"甲": 0, "乙": 1}}
    far = {**same, 20: {"甲": 0, "乙": 5}}
    assert krippendorff_alpha(far, "ordinal")["value"] < krippendorff_alpha(near, "ordinal")["value"] < 1
