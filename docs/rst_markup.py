"""MkDocs hook: drops the reStructuredText markup that fedhet's docstrings use and Markdown lacks.

The docstrings are written for ``help()`` and editors, with Sphinx roles (``:class:`Simulator```)
and ``::`` before literal blocks. mkdocstrings renders them as Markdown, where a role shows as
literal ``:class:`` text before the code span and ``::`` as a stray paragraph; this hook removes
both from the rendered API pages, leaving the code span and a single colon.
"""
from __future__ import annotations

import re

_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj|py:[a-z]+):(?=<code)")
_LONE_LITERAL_MARKER = re.compile(r"<p>::</p>\s*")
_TRAILING_LITERAL_MARKER = re.compile(r"::</p>")


def strip_rst_markup(html: str) -> str:
    """``html`` without Sphinx role prefixes before code spans and with ``::`` markers reduced."""
    html = _ROLE.sub("", html)
    html = _LONE_LITERAL_MARKER.sub("", html)
    return _TRAILING_LITERAL_MARKER.sub(":</p>", html)


def on_page_content(html, page, config, files):
    """MkDocs hook: only the API pages hold rendered docstrings."""
    if page.file.src_uri.startswith("api/"):
        return strip_rst_markup(html)
    return html
