"""The experiment schema: ``ExperimentConfig`` built from TOML and overrides, and written back.

Option dataclasses, ``option`` and ``ConfigError`` live in :mod:`fedhet.core.options`; this package
sits above the stages because the schema resolves component names through every stage's registry
(docs/design.md, "Layers").
"""
