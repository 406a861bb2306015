"""The claims page's verdict summaries, generated from committed ``claims.json`` records so they cannot drift.

Each block of ``docs/claims.md`` between ``<!-- claims-summary RECORD -->`` and ``<!-- /claims-summary -->``
is the rendering (:func:`fedhet.lab.claims.render.summary_from_json`) of ``RECORD``, a
``claims.json`` path relative to the repository (``fedhet claims report`` writes one beside every report).
After a new claims run, copy its ``runs/claims/report/claims.json`` to ``docs/claims/<date>.json``, point
the "Latest verdicts" block at it and run::

    python docs/claims_summary.py            # rewrite the blocks
    python docs/claims_summary.py --check    # exit 1 when a block differs from its record (the tests run this)
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "claims.md"
BLOCK = re.compile(r"(<!-- claims-summary (?P<record>\S+) -->\n)(?P<body>.*?)(<!-- /claims-summary -->)", re.S)


def render_page(text: str, root: Path = ROOT) -> str:
    """``text`` with every summary block replaced by the rendering of its record."""
    from fedhet.lab.claims.render import summary_from_json

    def block(match: re.Match) -> str:
        record = json.loads((root / match["record"]).read_text(encoding="utf-8"))
        return f"{match[1]}\n{summary_from_json(record)}\n\n{match[4]}"

    return BLOCK.sub(block, text)


def main(argv: list[str]) -> int:
    text = PAGE.read_text(encoding="utf-8")
    rendered = render_page(text)
    if "--check" in argv:
        if rendered != text:
            print(f"{PAGE}: a claims summary differs from its record; run python docs/claims_summary.py",
                  file=sys.stderr)
            return 1
        return 0
    if rendered != text:
        PAGE.write_text(rendered, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    raise SystemExit(main(sys.argv[1:]))
