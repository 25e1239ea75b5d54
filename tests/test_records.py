"""`cheems.records` checks of single values."""

from __future__ import annotations


def test_an_int_too_large_for_a_float_is_not_a_number():
    from cheems.records import is_number

    assert not is_number(10 ** 400) and not is_number(-(10 ** 400))
    assert is_number(10 ** 300) and is_number(0) and not is_number(True) and not is_number(float("inf"))
