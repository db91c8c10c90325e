"""A MkDocs hook: Sigma's docstrings' reStructuredText roles, as the API reference shows them.

Docstrings say :class:`Name` and ``code``; Markdown reads ``code`` as code already, but leaves a role's name in front
of it (":class:" then the code). This drops the role and, as Sphinx does for :func:`~a.b.c`, keeps the last part of
a ``~`` target. ``sigma help`` does the same for the terminal (sigmann_help.markup).
"""

from __future__ import annotations

import re

_ROLE = re.compile(r":(?:[a-z]+:)?[a-z]+:<code>(~?)([^<]*)</code>")


def on_page_content(html: str, **_) -> str:
    return _ROLE.sub(lambda m: f"<code>{m.group(2).rpartition('.')[2] if m.group(1) else m.group(2)}</code>", html)
