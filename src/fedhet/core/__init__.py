"""The core every other package builds on: flat parameters, stores, seeding, cohorts, the task and
its evaluation, dataset containers, registries, atomic I/O and option dataclasses.

Modules here import nothing from fedhet outside ``fedhet.core`` except the top-level core modules
(``fedhet.errors``, ``fedhet.names``, ``fedhet.logs``, ``fedhet.error_lines``, ``fedhet.presets``);
``tests/test_layering.py`` enforces it (docs/design.md, "Layers").
"""
