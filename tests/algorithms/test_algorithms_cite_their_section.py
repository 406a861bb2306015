"""Every algorithm module's docstring points at its numbered section of docs/algorithms.md, as that
page says ("every component's docstring ... points at the numbered section here that holds it"), and
the section exists."""
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import fedhet.algorithms
import fedhet.components  # noqa: F401  (registers every component)
from fedhet.core.registry import CLIENT_SOLVERS, SERVERS

PAGE = Path(__file__).resolve().parents[2] / "docs" / "algorithms.md"
# "docs/algorithms.md section 3", "sections 1 and 4", "sections 2, 5 and 6"; a citation may wrap.
CITATION = re.compile(r"docs/algorithms\.md\s+sections?\s+(?P<numbers>\d+(?:(?:\s*,\s*|\s+and\s+)\d+)*)")
MODULES = sorted(info.name for info in pkgutil.iter_modules(fedhet.algorithms.__path__, "fedhet.algorithms."))


def cited_sections(docstring: str) -> set[int]:
    text = re.sub(r"\s+", " ", docstring)
    return {int(number) for match in CITATION.finditer(text) for number in re.findall(r"\d+", match["numbers"])}


def numbered_sections() -> set[int]:
    return {int(match[1]) for line in PAGE.read_text(encoding="utf-8").splitlines()
            for match in [re.match(r"##\s+(\d+)\.\s", line)] if match}


def test_every_module_that_registers_a_method_is_checked():
    registering = {registry.get(name).factory.__module__ for registry in (CLIENT_SOLVERS, SERVERS)
                   for name in registry.names()}
    assert {name for name in registering if name.startswith("fedhet.algorithms.")} <= set(MODULES)
    assert len(MODULES) >= 17


@pytest.mark.parametrize("module_name", MODULES)
def test_the_module_docstring_names_a_section_of_the_algorithms_page_that_exists(module_name):
    docstring = importlib.import_module(module_name).__doc__ or ""
    cited = cited_sections(docstring)
    assert cited, f"{module_name}'s docstring names no docs/algorithms.md section"
    assert cited <= numbered_sections(), \
        f"{module_name} cites docs/algorithms.md section(s) {sorted(cited - numbered_sections())}, which do not exist"


def test_the_check_reads_wrapped_and_listed_citations_and_rejects_none():
    assert cited_sections("see docs/algorithms.md\n    sections 1 and 4") == {1, 4}
    assert cited_sections("docs/algorithms.md section 2, and more") == {2}
    assert cited_sections("docs/design.md section 2") == set()
    assert 99 not in numbered_sections() and {1, 2, 5} <= numbered_sections()
