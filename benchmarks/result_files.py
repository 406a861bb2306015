"""A benchmark's results: ``<prefix>-<timestamp>.json`` (every figure, the machine, the command line)
and ``.md`` (the table it printed), side by side under the results folder."""
from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any


def write_results(out: Path, prefix: str, record: dict[str, Any], table: str) -> Path:
    """Write both files under ``out`` and print ``table``; returns the ``.md`` path."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{prefix}-{stamp}.json").write_text(json.dumps(record, indent=2))
    markdown = out / f"{prefix}-{stamp}.md"
    markdown.write_text(table + "\n")
    print(table)
    return markdown
