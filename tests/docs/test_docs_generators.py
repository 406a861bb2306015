"""The docs site's generators: the configuration reference and the API pages' markup clean-up."""
import dataclasses

import fedhet.components  # noqa: F401  (registers every component)
from docs_modules import load
from fedhet.config.schema import COMPONENT_SECTIONS, RunOptions
from fedhet.core.registry import ALGORITHMS

reference = load("docs/gen_config_reference.py")
rst_markup = load("docs/rst_markup.py")


def test_config_reference_lists_every_component_and_option():
    text = reference.render()
    assert all(registry.names() for registry, _ in COMPONENT_SECTIONS.values())
    for field in dataclasses.fields(RunOptions):
        assert f"| `run.{field.name}` |" in text
    for section, (registry, _) in COMPONENT_SECTIONS.items():
        for name in registry.names():
            assert f'### `{section}.name = "{name}"`' in text
            for field in dataclasses.fields(registry.get(name).options_cls):
                assert f"| `{section}.{field.name}` |" in text, (section, name, field.name)
    for name, pair in ALGORITHMS.items():
        assert f"| `{name}` | `{pair.client}` | `{pair.server}` |" in text


def test_config_reference_cells_escape_pipes():
    assert reference._cell("a | b\nc") == "a \\| b c"
    assert reference._default("(required)") == "required"
    # fedhet writes none, never JSON's null (the TOML files, fedhet check, the reference alike).
    assert reference._default(None) == "`none`"
    assert reference._default(["a", None]) == '`["a", none]`' and reference._default(True) == "`true`"
    assert "null" not in reference.render()


def test_rst_roles_and_literal_markers_are_removed_from_rendered_docstrings():
    html = ("<p>Lives in :class:<code>RunHandle</code>; see :func:<code>run</code>.</p>"
            "<p>::</p>\n<pre>code</pre><p>The loop::</p><p>a :class: without code stays</p>")
    assert rst_markup.strip_rst_markup(html) == (
        "<p>Lives in <code>RunHandle</code>; see <code>run</code>.</p>"
        "<pre>code</pre><p>The loop:</p><p>a :class: without code stays</p>")
