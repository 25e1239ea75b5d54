"""The password hashes of the annotation accounts cost what cheems ships, in a process of its own.

tests/conftest.py makes the accounts created inside the test processes hash at argon2's lowest cost
(the suite creates hundreds); this module checks, in a fresh interpreter that does not load it,
that ``cheems.annotate.auth`` hashes with argon2id at argon2-cffi's default cost (3 passes over
64 MiB in 4 lanes, the RFC 9106 second recommendation) and that the hash checks its password."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("argon2")
pytest.importorskip("sqlalchemy")

SCRIPT = """
from cheems.annotate.auth import password_hash, _password_matches
stored = password_hash("正确的马-电池-订书钉")
print(stored)
print(_password_matches(stored, "正确的马-电池-订书钉"), _password_matches(stored, "wrong"))
"""


def test_a_fresh_process_hashes_at_the_shipped_cost():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    stored, checks = done.stdout.split("\n")[:2]
    assert stored.startswith("$argon2id$v=19$m=65536,t=3,p=4$"), stored
    assert checks == "True False"


def test_this_process_hashes_cheaply_with_the_same_algorithm():
    from cheems.annotate.auth import _password_matches, password_hash

    stored = password_hash("abc")
    assert stored.startswith("$argon2id$v=19$m=8,t=1,p=1$") and _password_matches(stored, "abc")
    assert not _password_matches(stored, "abd")
