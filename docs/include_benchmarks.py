"""MkDocs hook: the repository's ``benchmarks/README.md`` (workloads, commands, every measured figure)
published as the site's performance page, so the figures are written in one file only. The plots it
shows (``benchmarks/results/*.png``, linked as ``results/<name>.png``) are published beside it."""
from __future__ import annotations

from pathlib import Path

PAGE = "performance.md"
SOURCE = Path(__file__).resolve().parent.parent / "benchmarks" / "README.md"


def on_files(files, config):
    """MkDocs hook: add ``benchmarks/README.md`` as ``performance.md``."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, PAGE, content=SOURCE.read_text(encoding="utf-8")))
    for image in sorted((SOURCE.parent / "results").glob("*.png")):
        files.append(File.generated(config, f"results/{image.name}", abs_src_path=str(image)))
    return files
