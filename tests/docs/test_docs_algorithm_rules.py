"""docs/algorithms.md's rule tables are generated from the registered modules' docstrings
(docs/gen_algorithm_rules.py): the page is up to date, and the check fails when a docstring's row
or the page's row changes."""
import shutil

import pytest

import fedhet.algorithms.fedprox
import fedhet.components  # noqa: F401  (registers every component)
from docs_modules import ROOT, load
from fedhet.core.registry import CLIENT_SOLVERS, SERVERS

rules = load("docs/gen_algorithm_rules.py")
PAGE = ROOT / "docs" / "algorithms.md"
FEDPROX_ROW = "| FedProx (Li 2020) | gradient `+ mu (w - x)` (squared prox) | as SGD |"


def test_the_page_is_what_the_docstrings_generate(capsys):
    assert rules.main(["--check"]) == 0, capsys.readouterr().err


def test_every_row_of_the_page_tables_comes_from_a_registered_module():
    rows = rules.table_rows()
    page = PAGE.read_text(encoding="utf-8")
    assert len(rows["server"]) >= 10 and len(rows["local"]) >= 8
    for table, found in rows.items():
        inside = page.split(f"<!-- rules:{table} -->")[1].split(f"<!-- /rules:{table} -->")[0]
        body = [line for line in inside.splitlines() if line.startswith("|")][2:]
        assert body == found
    # The walk covers every module that registers a solver or a server method.
    modules = {module.__name__ for module in rules.registered_modules()}
    for registry in (CLIENT_SOLVERS, SERVERS):
        for name in registry.names():
            assert registry.get(name).factory.__module__ in modules
    # In the order of components.py: FedAvg's module first, its local row first.
    assert rules.registered_modules()[0].__name__ == "fedhet.algorithms.fedavg"
    assert rows["local"][0].startswith("| SGD (FedAvg) |") and rows["server"][0].startswith("| FedAvg |")


def test_a_changed_docstring_row_makes_the_check_fail_and_the_rewrite_follows(tmp_path, monkeypatch, capsys):
    page = tmp_path / "algorithms.md"
    shutil.copy(PAGE, page)
    assert FEDPROX_ROW in fedhet.algorithms.fedprox.__doc__
    changed = FEDPROX_ROW.replace("(squared prox)", "(squared proximal term)")
    doc = fedhet.algorithms.fedprox.__doc__
    monkeypatch.setattr(fedhet.algorithms.fedprox, "__doc__", doc.replace(FEDPROX_ROW, changed))
    assert rules.main(["--check", "--page", str(page)]) == 1
    hint = capsys.readouterr().err.strip()
    assert len(hint.splitlines()) == 1 and "stale" in hint and "FedProx" in hint
    assert rules.main(["--page", str(page)]) == 0
    text = page.read_text(encoding="utf-8")
    assert changed in text and FEDPROX_ROW not in text
    assert rules.main(["--check", "--page", str(page)]) == 0
    # Only that row changed.
    assert text == PAGE.read_text(encoding="utf-8").replace(FEDPROX_ROW, changed)


def test_a_changed_page_row_makes_the_check_fail(tmp_path, capsys):
    page = tmp_path / "algorithms.md"
    page.write_text(PAGE.read_text(encoding="utf-8").replace(FEDPROX_ROW, FEDPROX_ROW.replace("mu", "nu")),
                    encoding="utf-8")
    assert rules.main(["--check", "--page", str(page)]) == 1
    assert "line" in capsys.readouterr().err


def test_rule_blocks_are_parsed_with_continuation_lines_and_several_tables():
    doc = """Title (Someone, Venue 2024)

    Text.

    Rule table server:
        | A | b | c |
        | Long | first part
            second part | d |

    Rule table local:
        | L | m | n |
    """
    assert rules.rule_rows(doc) == {"server": ["| A | b | c |", "| Long | first part second part | d |"],
                                    "local": ["| L | m | n |"]}
    assert rules.rule_rows("No table here.") == {}


@pytest.mark.parametrize("doc, message", [
    ("T\n\nRule table local:\n\nText.", "has no rows"),
    ("T\n\nRule table local:\n    A | b |\n", "must read"),
    ("T\n\nRule table local:\n        | continued |\n", "continuation"),
])
def test_malformed_rule_blocks_are_refused(doc, message):
    with pytest.raises(ValueError, match=message):
        rules.rule_rows(doc, where="a module")


def test_a_page_without_markers_is_refused():
    with pytest.raises(ValueError, match="rules:local"):
        rules.render("# page\n\n| name | a | b |\n| --- | --- | --- |\n", {"local": ["| x | y | z |"]})
