"""Docstrings as a terminal shows them: the reStructuredText inline markup Sigma's docstrings use, left out.

Docstrings are written for Sphinx-style readers (``x`` for code, :class:`Name` for a cross-reference); in a
terminal the markup is noise around the words it marks, so ``sigma help`` prints the words alone.
"""

from __future__ import annotations

import re

#: :role:`target`, :role:`text <target>` and :role:`~package.module.Name`, with the role's domain if any
#: (:py:func:`...`).
_ROLE = re.compile(r":(?:[a-z]+:)?[a-z]+:`([^`]+)`")
#: ``literal`` and `interpreted text` (RST's default role); never across lines' ends of a paragraph.
_LITERAL = re.compile(r"``([^`]+)``|(?<![\w`])`([^`\n]+)`(?![\w`])")


def plain(text: str) -> str:
    """``text`` without inline markup: ``x`` -> x, :class:`y` -> y, :func:`~a.b.c` -> c, :ref:`words <t>` -> words."""
    text = _ROLE.sub(lambda match: _target(match.group(1)), text)
    return _LITERAL.sub(lambda match: match.group(1) or match.group(2), text)


def _target(inner: str) -> str:
    """What a role's content reads as: its text before ``<target>``, or the target, ``~`` keeping the last part."""
    words = re.fullmatch(r"(.+?)\s*<[^>]+>", inner, flags=re.S)
    if words:
        return words.group(1)
    return inner[1:].rpartition(".")[2] if inner.startswith("~") else inner
