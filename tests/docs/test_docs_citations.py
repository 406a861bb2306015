"""What the code cites in the repository's own docs exists: every ``docs/<page>.md`` (and
``benchmarks/README.md``) named in src/fedhet, every numbered section (``docs/algorithms.md section
3``, ``sections 1 and 4``) and every quoted section (``docs/design.md, "Layers"``); and the
registry's docstring example names a registration that exists."""
import re

import pytest

import fedhet.components  # noqa: F401  (registers every component)
from docs_modules import ROOT
from fedhet.core import registry

SRC = ROOT / "src" / "fedhet"
# A cited page, then optionally ``section N`` / ``sections N, M and K`` or ``, "Heading"`` / ``("Heading"``.
CITATION = re.compile(r"(?P<page>(?:docs/[\w/-]+|benchmarks/README)\.md)`*"
                      r"(?:\s+sections?\s+(?P<numbers>\d+(?:(?:\s*,\s*|\s+and\s+)\d+)*)"
                      r"|,?\s*\(?\"(?P<title>[^\"\n]+)\")?")


def _citations():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        # Joined lines: a citation may wrap ("docs/algorithms.md\n    section 3").
        text = re.sub(r"\s*\n\s*(?:#\s*)?", " ", path.read_text())
        for match in CITATION.finditer(text):
            found.append((path.relative_to(ROOT).as_posix(), match))
    return found


CITATIONS = _citations()


def _headings(page: str) -> list[str]:
    return [line.lstrip("#").strip() for line in (ROOT / page).read_text().splitlines() if line.startswith("#")]


def _has_section(page: str, title: str) -> bool:
    """A heading that starts with ``title`` (after its number), or a bold run label ``**title**``."""
    text = (ROOT / page).read_text()
    headings = [re.sub(r"^\d+\.\s*", "", h) for h in _headings(page)]
    return any(h == title or h.startswith(title + " ") or h.startswith(title + ":") for h in headings) \
        or f"**{title}**" in text or f"**{title}** " in text


def test_citations_were_found():
    assert len(CITATIONS) > 40
    assert any(m.group("numbers") for _, m in CITATIONS) and any(m.group("title") for _, m in CITATIONS)


@pytest.mark.parametrize("source, match", CITATIONS, ids=[f"{s}:{m.group('page')}" for s, m in CITATIONS])
def test_cited_page_and_section_exist(source, match):
    page = match.group("page")
    assert (ROOT / page).is_file(), f"{source} cites {page}, which does not exist"
    if match.group("numbers"):
        numbered = {int(m.group(1)) for h in _headings(page) for m in [re.match(r"(\d+)\.", h)] if m}
        for number in re.findall(r"\d+", match.group("numbers")):
            assert int(number) in numbered, f"{source} cites {page} section {number}; its sections: {sorted(numbered)}"
    if match.group("title"):
        assert _has_section(page, match.group("title")), \
            f"{source} cites {page}, \"{match.group('title')}\", which is no heading of it: {_headings(page)}"


def test_the_section_check_rejects_what_does_not_exist():
    assert _has_section("docs/design.md", "Layers")
    assert not _has_section("docs/design.md", "No such section")
    numbered = [h for h in _headings("docs/algorithms.md") if re.match(r"\d+\.", h)]
    assert len(numbered) >= 9


def test_registry_docstring_example_names_a_real_registration():
    doc = registry.__doc__
    match = re.search(r"@(\w+)\.register\(\"(\w+)\", (\w+)\)\s*def (\w+)\(options: (\w+)\) -> (\w+)", doc)
    assert match, "registry.py's docstring has no registration example"
    kind, name, options_cls, factory, annotated, returned = match.groups()
    entry = getattr(registry, kind).get(name)
    assert entry.options_cls.__name__ == options_cls == annotated
    assert entry.factory.__name__ == factory
    annotation = entry.factory.__annotations__["return"]
    assert getattr(annotation, "__name__", annotation) == returned
    module_file = re.search(r"``(fedhet/[\w/]+\.py)``", doc).group(1)
    assert entry.factory.__module__.replace(".", "/") + ".py" == module_file
    pairing = re.search(r"register_algorithm\(\"(\w+)\", client=\"(\w+)\", server=\"(\w+)\"\)", doc)
    assert pairing, "registry.py's docstring has no algorithm pairing example"
    pair = registry.ALGORITHMS[pairing.group(1)]
    assert (pair.client, pair.server) == pairing.group(2, 3)
