"""What the annotation server accepts from a request before any of it reaches the database.

Ids in a path are database ids: whole numbers from 1 to :data:`MAX_ID` (the largest value of an
``INTEGER`` column on PostgreSQL; SQLite's is larger), so a larger one is a 422 naming the path
parameter, never an overflow in the driver. Text anywhere in a JSON body must be storable: a lone
UTF-16 surrogate (``"\\ud800"`` in JSON, which Python's parser accepts) cannot be encoded as UTF-8,
and PostgreSQL text cannot hold NUL; either is a 422 naming the field (``note``,
``spans[0].note``, ``scores`` for a key). The standard library only.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["MAX_ID", "BadInput", "check_text", "unstorable_text"]

MAX_ID = 2**31 - 1
_UNSTORABLE = re.compile("[\ud800-\udfff\x00]")


class BadInput(ValueError):
    """A body part that cannot be stored; ``field`` names it as the protocol's errors do."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


def unstorable_text(text: str) -> str | None:
    """Why ``text`` cannot be stored (a lone surrogate, NUL), or None when it can."""
    found = _UNSTORABLE.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return f"holds a NUL character at {found.start()}"
    return f"holds a lone UTF-16 surrogate (U+{ord(found.group()):04X}) at {found.start()}, not valid Unicode text"


def check_text(body: Any) -> Any:
    """``body`` unchanged when every text in it (keys too) can be stored; else BadInput naming
    the first bad field. Walks without recursion, so any depth the JSON parser took is fine."""
    stack: list[tuple[str, Any]] = [("", body)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            why = unstorable_text(value)
            if why:
                raise BadInput(where or "body", why)
        elif isinstance(value, dict):
            items = list(value.items())
            for key, item in reversed(items):
                why = unstorable_text(key) if isinstance(key, str) else None
                if why:
                    raise BadInput(where or "body", f"a key {why}")
                stack.append((f"{where}.{key}" if where else str(key), item))
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", item) for i, item in reversed(list(enumerate(value))))
    return body
