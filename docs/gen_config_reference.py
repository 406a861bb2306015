"""Generates the configuration reference page from the option dataclasses and the registries.

It reads what ``fedhet options`` reads (``describe_options`` over ``RunOptions`` and every registered
component), so the page cannot drift from the code. Used two ways:

* as a MkDocs hook (``hooks:`` in ``mkdocs.yml``): ``on_files`` adds ``configuration.md``, generated
  at build time, to the site;
* as a script: ``python docs/gen_config_reference.py [OUT.md]`` prints or writes the page.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

PAGE = "configuration.md"
_SRC = Path(__file__).resolve().parents[1] / "src"


def _import_fedhet():
    # The docs are built from a checkout: import its src/ even when fedhet is not installed.
    if str(_SRC) not in sys.path:
        sys.path.insert(0, str(_SRC))
    from fedhet.config.schema import COMPONENT_SECTIONS, RunOptions, load_components
    from fedhet.core.options import describe_options
    from fedhet.core.registry import ALGORITHMS

    load_components()
    return describe_options, COMPONENT_SECTIONS, RunOptions, ALGORITHMS


def _cell(text: object) -> str:
    # A Markdown table cell: pipes would end the cell, newlines the row.
    return str(text).replace("|", "\\|").replace("\n", " ")


def _toml_value(value: object) -> str:
    """A default as a config file writes it: ``none`` for None (fedhet's word, never JSON's ``null``),
    ``true``/``false``, quoted strings, lists in brackets."""
    if value is None:
        return "none"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    return json.dumps(value, default=str)


def _default(value: object) -> str:
    return "required" if value == "(required)" else f"`{_toml_value(value)}`"


def _options_table(rows, section: str) -> list[str]:
    if not rows:
        return ["No options.", ""]
    lines = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    for key, type_name, default, text in rows:
        lines.append(f"| `{section}.{key}` | {_cell(type_name)} | {_cell(_default(default))} | {_cell(text)} |")
    return lines + [""]


def render() -> str:
    """The Markdown text of the configuration reference."""
    describe_options, sections, run_options, algorithms = _import_fedhet()
    lines = [
        "# Configuration reference",
        "",
        "Generated from the option dataclasses at build time (`docs/gen_config_reference.py`); "
        "`fedhet options [SECTION [NAME]]` prints the same on the command line.",
        "",
        "A config file is TOML with one table per section. Each component section chooses an "
        "implementation with `name` and takes that implementation's options; `--set section.key=value` "
        "overrides any of them. `[symbol]` is the paper's notation.",
        "",
        "## `algorithm`",
        "",
        "A top-level key naming a local solver and a server method together:",
        "",
        "| `algorithm` | `client.name` | `server.name` |",
        "| --- | --- | --- |",
    ]
    lines += [f"| `{name}` | `{pair.client}` | `{pair.server}` |" for name, pair in sorted(algorithms.items())]
    lines += ["", "## `[run]`", ""]
    lines += _options_table(describe_options(run_options), "run")
    for section, (registry, default_name) in sections.items():
        lines += [f"## `[{section}]`", "", f"`{section}.name`, default `{_toml_value(default_name)}`, one of: "
                  + ", ".join(f"`{n}`" for n in registry.names()) + ".", ""]
        for name in registry.names():
            entry = registry.get(name)
            lines += [f"### `{section}.name = \"{name}\"`", ""]
            if entry.summary:
                lines += [entry.summary, ""]
            lines += _options_table(describe_options(entry.options_cls), section)
    from fedhet.system.options import SystemOptions

    lines += ["## `[system]`", "", "Optional: device profiles, availability and the virtual clock's round policy; "
              "without the section a run has no clock. See [Time](system.md).", ""]
    lines += _options_table(describe_options(SystemOptions), "system")
    from fedhet.system.asynchronous import AsyncOptions

    lines += ["## `[asynchronous]`", "", "Optional: FedBuff and FedAsync on the virtual clock (needs `[system]`); "
              "one server step per round. See [Asynchronous FL](async.md).", ""]
    lines += _options_table(describe_options(AsyncOptions), "asynchronous")
    from fedhet.lab.sweep.options import SweepOptions

    lines += ["## `[sweep]`", "", "How `fedhet sweep` executes the runs of a base file (ignored by `fedhet run`); "
              "the command line's `--executor`, `--jobs` and `--ray-*` flags override these keys. "
              "See [Experiments: sweeps on a Ray cluster](experiments.md#sweeps-on-a-ray-cluster).", ""]
    lines += _options_table(describe_options(SweepOptions), "sweep")
    return "\n".join(lines)


def on_files(files, config):
    """MkDocs hook: add the generated page to the site's files."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, PAGE, content=render()))
    return files


if __name__ == "__main__":
    text = render()
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(text, encoding="utf-8")
    else:
        print(text)
