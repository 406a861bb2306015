"""The Flower app's run config (``[tool.flwr.app.config]``) and the app directory ``flwr run`` takes.

Run-config keys (docs/flower.md, "From a fedhet config to a Flower deployment"):

- ``fedhet-config``: the resolved fedhet TOML itself (so every SuperNode builds the same federation
  without sharing a file system);
- ``participation``: ``"fedhet"`` (the config's participation process samples each round's clients;
  the default) or ``"nodes"`` (every client hosted by a connected SuperNode trains every round);
- ``round-timeout``: seconds the ServerApp waits for a round's replies (missing replies are failures);
- ``min-nodes`` / ``connect-timeout``: SuperNodes to wait for before round 1, and for how long;
- ``result-dir``: where the ServerApp writes ``params.pt``, ``metrics.jsonl`` and ``summary.json``
  (empty: nowhere).
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Mapping

from fedhet.core.options import ConfigError

PARTICIPATION_MODES = ("fedhet", "nodes")
# Flower's app name in pyproject.toml and FAB id (publisher/name).
APP_NAME = "fedhet-flower"
APP_PUBLISHER = "fedhet"


@dataclasses.dataclass(frozen=True)
class AppSettings:
    config_text: str
    participation: str = "fedhet"
    round_timeout: float = 120.0
    min_nodes: int = 1
    connect_timeout: float = 60.0
    result_dir: str = ""

    def __post_init__(self) -> None:
        if self.participation not in PARTICIPATION_MODES:
            raise ConfigError("participation", self.participation, "allowed: " + ", ".join(PARTICIPATION_MODES))
        if not self.round_timeout > 0:
            raise ConfigError("round-timeout", self.round_timeout, "seconds, greater than 0")
        if self.min_nodes < 1:
            raise ConfigError("min-nodes", self.min_nodes, "at least 1")
        if not self.connect_timeout > 0:
            raise ConfigError("connect-timeout", self.connect_timeout, "seconds, greater than 0")

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, Any]) -> "AppSettings":
        if "fedhet-config" not in run_config:
            raise ConfigError("fedhet-config", None, "the run config must carry the fedhet TOML "
                                                     "(write the app with `fedhet flower app CONFIG --out DIR`)")
        def number(key: str, default: Any, kind: type) -> Any:
            value = run_config.get(key, default)
            try:
                return kind(value)
            except (TypeError, ValueError):      # a configuration error, not a traceback in the ServerApp
                raise ConfigError(key, value, f"a number ({kind.__name__})") from None

        return cls(config_text=str(run_config["fedhet-config"]),
                   participation=str(run_config.get("participation", "fedhet")),
                   round_timeout=number("round-timeout", 120.0, float),
                   min_nodes=number("min-nodes", 1, int),
                   connect_timeout=number("connect-timeout", 60.0, float),
                   result_dir=str(run_config.get("result-dir", "")))

    def to_run_config(self) -> dict[str, Any]:
        return {"fedhet-config": self.config_text, "participation": self.participation,
                "round-timeout": self.round_timeout, "min-nodes": self.min_nodes,
                "connect-timeout": self.connect_timeout, "result-dir": self.result_dir}


def _toml_value(value: Any) -> str:
    # JSON strings are valid TOML basic strings (escapes included); numbers print the same.
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def app_pyproject(settings: AppSettings) -> str:
    """The ``pyproject.toml`` of a Flower app running fedhet's ServerApp and ClientApp."""
    import flwr

    lines = ["[build-system]", 'requires = ["setuptools>=77"]', 'build-backend = "setuptools.build_meta"', "",
             "[project]", f'name = "{APP_NAME}"', 'version = "1.0.0"',
             'description = "fedhet methods as a Flower app (docs/flower.md)"', 'license = "Apache-2.0"',
             f'dependencies = ["flwr=={flwr.__version__}"]', "",
             "[tool.flwr.app]", f'publisher = "{APP_PUBLISHER}"', "",
             "[tool.flwr.app.components]", 'serverapp = "fedhet.flower.server_app:app"',
             'clientapp = "fedhet.flower.client_app:app"', "", "[tool.flwr.app.config]"]
    lines += [f"{key} = {_toml_value(value)}" for key, value in settings.to_run_config().items()]
    return "\n".join(lines) + "\n"


def write_app(directory: str | Path, settings: AppSettings) -> Path:
    """Write the app directory for ``flwr run DIRECTORY CONNECTION`` (its ``pyproject.toml`` only: the
    components are fedhet's own modules, which every SuperNode imports from its fedhet install)."""
    from fedhet.core.io import atomic_write_text

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write_text(directory / "pyproject.toml", app_pyproject(settings))
    return directory
