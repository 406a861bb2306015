"""The experiment schema: ``ExperimentConfig`` built from TOML and overrides, and written back.

Option dataclasses, ``option`` and ``ConfigError`` live in :mod:`fedhet.core.options`; this package
sits above the stages because the schema resolves component names through every stage's registry
(docs/design.md, "Layers").

This package is the configuration's entrance: ``__all__`` names what the lab and the library's edges
use to read, build and write configurations (the schema, the option machinery, the registries and
the option dataclasses of the client, server and system stages), and they import it from here. Each
name is imported on first use (PEP 562), so importing ``fedhet.config`` imports none of its modules.
"""
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # The names of _EXPORTS below, for type checkers; at run time __getattr__ imports them on first use.
    from fedhet.client.base import ClientOptions
    from fedhet.config.schema import (
        COMPONENT_SECTIONS,
        SECTIONS,
        ExperimentConfig,
        RunOptions,
        apply_overrides,
        config_to_toml,
        load_components,
        load_config,
        parse_override,
        read_toml_file,
        resolve_config,
        toml_literal,
    )
    from fedhet.core.options import ConfigError, build_options, option, options_to_dict
    from fedhet.core.registry import ALGORITHMS, CLIENT_SOLVERS, SERVERS
    from fedhet.server.base import ServerOptions
    from fedhet.system.options import SystemOptions

# name -> the module that defines it (the same pairs as the imports above).
_EXPORTS = {
    "ClientOptions": "fedhet.client.base",
    "apply_overrides": "fedhet.config.schema",
    "COMPONENT_SECTIONS": "fedhet.config.schema",
    "config_to_toml": "fedhet.config.schema",
    "ExperimentConfig": "fedhet.config.schema",
    "load_components": "fedhet.config.schema",
    "load_config": "fedhet.config.schema",
    "parse_override": "fedhet.config.schema",
    "read_toml_file": "fedhet.config.schema",
    "resolve_config": "fedhet.config.schema",
    "RunOptions": "fedhet.config.schema",
    "SECTIONS": "fedhet.config.schema",
    "toml_literal": "fedhet.config.schema",
    "build_options": "fedhet.core.options",
    "ConfigError": "fedhet.core.options",
    "option": "fedhet.core.options",
    "options_to_dict": "fedhet.core.options",
    "ALGORITHMS": "fedhet.core.registry",
    "CLIENT_SOLVERS": "fedhet.core.registry",
    "SERVERS": "fedhet.core.registry",
    "ServerOptions": "fedhet.server.base",
    "SystemOptions": "fedhet.system.options",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ClientOptions", "apply_overrides", "COMPONENT_SECTIONS", "config_to_toml", "ExperimentConfig",
           "load_components", "load_config", "parse_override", "read_toml_file", "resolve_config", "RunOptions",
           "SECTIONS", "toml_literal", "build_options", "ConfigError", "option", "options_to_dict", "ALGORITHMS",
           "CLIENT_SOLVERS", "SERVERS", "ServerOptions", "SystemOptions"]
