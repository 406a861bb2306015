"""The ``fedhet`` verbs: the library's own in :mod:`fedhet.cli`, the lab's one module each in
:mod:`fedhet.lab.commands` with ``add_parser(subparsers)`` and ``run(args) -> int`` (docs/design.md,
"Layers"), listed by ``fedhet --help`` in a fixed order, and every lab verb handled by the CLI's
interrupt and one-line error paths."""
from __future__ import annotations

import argparse
import inspect

import pytest

from fedhet.cli import build_parser, main
from fedhet.core.options import ConfigError
from fedhet.lab.commands import LAB_COMMANDS

# `fedhet --help` lists the verbs in this order: the library's first, then the lab's, then flower and traces.
VERBS = ("run", "check", "options", "init", "sweep", "report", "claims", "tune", "tune-claims", "flower", "traces")
LAB_VERBS = ("sweep", "report", "claims", "tune", "tune-claims")

# The smallest command line each lab verb parses (nothing runs: the tests replace the handler).
ARGUMENTS = {"sweep": ["sweep", "base.toml"], "report": ["report", "runs", "--out", "report"],
             "claims": ["claims", "list"], "tune": ["tune", "base.toml", "--param", "client.learning_rate=0.1"],
             "tune-claims": ["tune-claims", "--dry-run"]}


def _verbs(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def _added_verb(module) -> str:
    """The one verb ``module.add_parser`` adds to an empty set of sub-command parsers."""
    verbs = argparse.ArgumentParser().add_subparsers(dest="command")
    module.add_parser(verbs)
    [verb] = verbs.choices
    return verb


def test_help_lists_the_verbs_in_order(capsys):
    assert list(_verbs(build_parser())) == list(VERBS)
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    assert "{" + ",".join(VERBS) + "}" in capsys.readouterr().out


def test_every_lab_verb_is_one_module_with_add_parser_and_run():
    assert [_added_verb(module) for module in LAB_COMMANDS] == list(LAB_VERBS)
    for module in LAB_COMMANDS:
        assert module.__name__.startswith("fedhet.lab.commands.")
        assert list(inspect.signature(module.add_parser).parameters) == ["subparsers"], module.__name__
        assert list(inspect.signature(module.run).parameters) == ["args"], module.__name__


@pytest.mark.parametrize("module", LAB_COMMANDS, ids=LAB_VERBS)
def test_the_parsed_lab_verb_is_handled_by_its_module_run(module):
    args = build_parser().parse_args(ARGUMENTS[_added_verb(module)])
    assert args.handler is module.run


@pytest.mark.parametrize("module", LAB_COMMANDS, ids=LAB_VERBS)
def test_a_lab_verb_interrupted_or_failing_gets_the_cli_line(module, monkeypatch, capsys):
    argv = ARGUMENTS[_added_verb(module)]

    def interrupted(args):
        raise KeyboardInterrupt

    def refused(args):
        raise ConfigError("--out", "x", "a planted error")

    monkeypatch.setattr(module, "run", interrupted)
    assert main(argv) == 130
    assert capsys.readouterr().err == "fedhet: interrupted\n"
    monkeypatch.setattr(module, "run", refused)
    assert main(argv) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("fedhet: ") and "a planted error" in line
    assert main([*argv, "--no-such-flag"]) == 2
    assert capsys.readouterr().err == (f"fedhet {argv[0]}: unrecognized arguments: --no-such-flag "
                                       f"(see fedhet {argv[0]} --help)\n")


@pytest.mark.parametrize("module", LAB_COMMANDS, ids=LAB_VERBS)
def test_a_lab_verb_takes_quiet_or_verbose_not_both(module, monkeypatch, capsys):
    verb = _added_verb(module)
    words = [verb, "--quiet", *ARGUMENTS[verb][1:]]
    monkeypatch.setattr(module, "run", lambda args: 0)
    assert main(words) == 0
    assert main([verb, "--verbose", *ARGUMENTS[verb][1:]]) == 0
    with pytest.raises(SystemExit) as exit_:
        main([verb, "--quiet", "--verbose", *ARGUMENTS[verb][1:]])
    assert exit_.value.code == 2
    assert "--quiet and --verbose exclude each other" in capsys.readouterr().err
