"""A Griffe extension for the API reference: Sphinx cross-reference roles in docstrings as code.

The docstrings of cheems name other objects the Sphinx way (:func:`~cheems.graph.resolve_conflicts`,
:mod:`cheems.formats`), which Markdown would show as a literal ``:func:`` before the code. This
extension rewrites each such role into a plain code span, the last dotted part only when the
target starts with ``~`` (as Sphinx shows it): `resolve_conflicts`, `cheems.formats`.
Loaded by mkdocstrings (mkdocs.yml, ``extensions``); the docstrings themselves are unchanged.
"""

from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|meth|class|mod|data|attr|obj|exc|const):`(~?)([^`]+)`")


def plain(match: re.Match) -> str:
    target = match.group(2)
    return f"`{target.rsplit('.', 1)[-1] if match.group(1) else target}`"


class SphinxRolesAsCode(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(plain, obj.docstring.value)
