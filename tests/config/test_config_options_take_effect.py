"""No configuration value is recorded without taking effect (issue 23 item 5).

Registry-derived: every registered component (client solvers, server methods, participation
processes, partitions, models, and the data sets this machine has) is built from a configuration
whose options object records which fields are read, and run for a few rounds. A field that is never
read would be written to ``config.toml`` and change nothing; each such field must be *gated*: it
takes effect only under another setting (its gate, listed in :data:`GATES`), is read once that gate
is on, and a non-default value with the gate off is refused in one line naming the field and the
gate (``fedhet.core.options.refuse_inactive``). The solver a factory builds holds the configuration's
own options (none replaced or shadowed). And every entry point (file, ``--set``, ``load_config``,
``fedhet check``, sweep, tune, claims, Flower) resolves the same settings to the same configuration.
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import fedhet.components  # noqa: F401  (registers every component before the parametrisations read them)
from fedhet.backends.sequential import SequentialBackend
from fedhet.cli import main
from fedhet.config.schema import COMPONENT_SECTIONS, Component, load_config
from fedhet.core.options import ConfigError
from fedhet.core.registry import ALGORITHMS, SERVERS
from fedhet.engine.assembly import simulator_from_config
from fedhet.engine.dataset_cache import DatasetCache
from fedhet.engine.runner import build_federation

FMNIST_ROOT = Path("/usr/share/datasets/fashion-mnist")
ROUNDS = 3
# A small Synthetic(1,1) federation: every client solver, server method and participation process runs here.
SYNTHETIC = ["data.name=synthetic", "data.num_devices=12", "data.max_device_size=60", "partition.name=natural",
             "model.name=logreg", "participation.clients_per_round=4", "client.steps=2", "client.batch_size=8",
             "run.progress=false"]
# Image models need images: Fashion-MNIST, a few one-step clients.
IMAGES = ["data.name=fmnist", f"data.root={FMNIST_ROOT}", "partition.name=iid", "partition.num_clients=20",
          "model.name=mlp", "participation.clients_per_round=2", "client.steps=1", "client.batch_size=4",
          "run.progress=false"]

# (section, field) -> (the setting that makes it take effect, a non-default value of the field).
AWARE_FIELDS = {"aware_alpha": 0.3, "aware_normalize": False, "aware_solver_tol": 1e-6,
                "aware_solver_max_iter": 7, "aware_momentum_layers": ["linear.weight"], "aware_kernel": "reference"}
GATES: dict[tuple[str, str], tuple[str, Any]] = {
    ("client", "lr_step_every"): ("client.lr_step_start=2", 7),
    ("client", "lr_step_factor"): ("client.lr_step_start=2", 0.25),
    ("participation", "transition"): ("participation.pattern=markov", 0.2),
    ("participation", "cycle"): ("participation.pattern=cyclic", 7),
    **{("server", name): ("server.aware=true", value) for name, value in AWARE_FIELDS.items()},
}


# --- options that record what is read --------------------------------------------------------------

_RECORDING: dict[type, type] = {}
_NOT_USES = ("dataclasses.py", "core/options.py")   # equality, repr, replace, validation, options_to_dict


def recording(options: Any, reads: set[str]) -> Any:
    """A copy of ``options`` (same class, by a subclass) that adds to ``reads`` every field read
    by code other than dataclass machinery and option validation (which read every field)."""
    cls = type(options)
    if cls not in _RECORDING:
        names = {f.name for f in dataclasses.fields(cls)}

        def __getattribute__(self, name):
            if name in names and not sys._getframe(1).f_code.co_filename.endswith(_NOT_USES):
                object.__getattribute__(self, "_reads").add(name)
            return object.__getattribute__(self, name)
        _RECORDING[cls] = type(cls.__name__, (cls,), {"__getattribute__": __getattribute__})
    copy = object.__new__(_RECORDING[cls])
    for field in dataclasses.fields(cls):
        object.__setattr__(copy, field.name, getattr(options, field.name))
    object.__setattr__(copy, "_reads", reads)
    return copy


def base_for(section: str, name: str) -> list[str]:
    """The settings a component of ``section`` named ``name`` is built in (its section's other keys
    left out, since they belong to the default component)."""
    if section == "model" or (section == "data" and name == "fmnist"):
        base = IMAGES
    elif section == "partition" and name != "natural":
        base = [*SYNTHETIC, "partition.num_clients=12"]
    else:
        base = SYNTHETIC
    kept = [item for item in base if not item.startswith(f"{section}.")] if section != "partition" or name == "natural" \
        else [item for item in base if item != "partition.name=natural"]
    if section == "data" and name == "fmnist":
        kept.append(f"data.root={FMNIST_ROOT}")
    if section == "server" and SERVERS.get(name).client is not None:
        kept.append(f"client.name={SERVERS.get(name).client}")     # FedDyn's server reads FedDyn's client
    return [*kept, f"{section}.name={name}"]


# The data sets the cases load, kept between them (Fashion-MNIST took ~13 s a load on a busy 2-core machine):
# the federation is the same with or without the cache (fedhet.engine.dataset_cache).
_DATASETS = DatasetCache()


def reads_of(section: str, settings: list[str]) -> tuple[set[str], Any]:
    """The fields of ``section``'s options read while building the run and running ``ROUNDS`` rounds.
    A data set's own options are read only when it is loaded: its cases load it afresh."""
    config = load_config(None, settings)
    reads: set[str] = set()
    component = getattr(config, section)
    config = dataclasses.replace(config, **{section: Component(component.name, recording(component.options, reads))})
    datasets = None if section == "data" else _DATASETS
    simulator = simulator_from_config(config, build_federation(config, torch.device("cpu"), datasets=datasets),
                                      backend=SequentialBackend())
    solver = simulator.solver
    for _ in range(ROUNDS):
        simulator.run_round()
    return reads, (config, solver)


def _cases():
    for section, (registry, _default) in COMPONENT_SECTIONS.items():
        for name in registry.names():
            # ResNet-18 takes ~13 s for its rounds on a CPU; the others well under 3 s.
            marks = [pytest.mark.slow] if (section, name) == ("model", "resnet18_gn") else []
            yield pytest.param(section, name, id=f"{section}-{name}", marks=marks)


def _skip_reason(section: str, name: str):
    if section == "data" and name not in ("synthetic", "fmnist"):
        return f"data.name = {name}: its files are not on this machine (the test never downloads)"
    if section == "data" and name == "fmnist" and not FMNIST_ROOT.is_dir():
        return "Fashion-MNIST is not on this machine"
    if section == "model" and name == "neox_classifier":
        return "a text model: needs a tokenised text data set"
    if section == "partition" and name == "flwr":
        return "Flower Datasets partitioners: tests/data covers them with the flower extra"
    if section == "participation" and name == "trace":
        return ("draws from the virtual clock's time, which this helper's simulator has not: "
                "tests/engine/test_engine_clock.py runs it under a [system] section")
    if section == "model" and not FMNIST_ROOT.is_dir():
        return "image models are built on Fashion-MNIST, which is not on this machine"
    return None


@pytest.mark.parametrize("section, name", list(_cases()))
def test_every_option_of_every_component_takes_effect_or_is_gated(section, name):
    reason = _skip_reason(section, name)
    if reason:
        pytest.skip(reason)
    settings = base_for(section, name)
    reads, (config, solver) = reads_of(section, settings)
    options = getattr(config, section).options
    unread = sorted({field.name for field in dataclasses.fields(options)} - reads)
    ungated = [field for field in unread if (section, field) not in GATES]
    assert not ungated, (
        f"{section}.name = {name!r}: option(s) {', '.join(f'{section}.{f}' for f in ungated)} were never read while "
        f"building the run and running {ROUNDS} rounds: a value set there would be recorded in config.toml and change "
        "nothing. Make it take effect, or refuse it unless the setting it depends on is on "
        "(fedhet.core.options.refuse_inactive) and list that gate in GATES")
    if section == "client":       # the solver holds the configuration's own options, none replaced
        assert solver.options == config.client.options
    for field in unread:          # each gated option takes effect once its gate is on ...
        gate, value = GATES[section, field]
        gate_key = gate.split("=")[0]
        try:
            gate_on, _ = reads_of(section, [*settings, gate])
        except ConfigError as error:
            # ... or this component refuses the gate itself (FedDyn's server: no AWARE extension),
            # so the option can never take effect here, and a value for it is refused below.
            assert error.key == gate_key, error
        else:
            assert field in gate_on, f"{section}.{field} is not read even with {gate}"
        # With the gate off, a value other than the default is refused naming the field and the gate.
        text = str(value).lower() if isinstance(value, bool) else str(value).replace("'", '"')
        with pytest.raises(ConfigError) as caught:
            load_config(None, [*settings, f"{section}.{field}={text}"])
        assert str(caught.value).startswith(f"{section}.{field} = ") and gate_key in str(caught.value)
        assert "\n" not in str(caught.value)


def test_every_gate_names_an_option_that_exists():
    """GATES is exact: every entry names a field of its section (of some registered component)."""
    for section, field in GATES:
        registry = COMPONENT_SECTIONS[section][0]
        assert any(field in {f.name for f in dataclasses.fields(registry.get(name).options_cls)}
                   for name in registry.names()), (section, field)


# --- every entry point resolves the same settings to the same configuration --------------------------

# Settings with non-default values in every section (a gated option with its gate on included).
SETTINGS = {
    "data.name": "synthetic", "data.num_devices": 12, "data.max_device_size": 60, "data.alpha": 0.5,
    "partition.name": "natural", "model.name": "logreg", "participation.name": "heterogeneous",
    "participation.pattern": "cyclic", "participation.cycle": 5, "participation.mean": 0.3,
    "client.learning_rate": 0.07, "client.steps": 3, "client.batch_size": 8, "client.lr_step_start": 2,
    "client.lr_step_every": 2, "server.learning_rate": 0.5, "server.aware": True, "server.aware_alpha": 0.3,
    "run.rounds": 4,
}
# What differs by design between entry points: where the run is written and how it is shown.
NAMING_KEYS = {"run.name", "run.out_dir", "run.progress"}


def _toml_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"' if isinstance(value, str) else repr(value)


def _file_text(settings: dict[str, Any], algorithm: str | None) -> str:
    sections: dict[str, list[str]] = {}
    for key, value in settings.items():
        section, name = key.split(".", 1)
        sections.setdefault(section, []).append(f"{name} = {_toml_literal(value)}")
    head = f'algorithm = "{algorithm}"\n' if algorithm else ""
    return head + "".join(f"[{section}]\n" + "\n".join(lines) + "\n\n" for section, lines in sections.items())


def _flat(config) -> dict[str, Any]:
    return {key: value for key, value in config.to_flat_dict().items() if key not in NAMING_KEYS}


def _resolved_everywhere(tmp_path: Path, settings: dict[str, Any], algorithm: str | None, capsys) -> dict[str, dict]:
    """The configuration ``settings`` (and ``algorithm``) resolve to, through each entry point."""
    from fedhet.flower.build import config_from_text, config_text
    from fedhet.lab.claims.definitions import load_protocols
    from fedhet.lab.claims.planning import plan_protocol
    from fedhet.lab.sweep.plan import plan_sweep
    from fedhet.lab.tuning.trials import ConfigTrialRunner

    path = tmp_path / "file.toml"
    path.write_text(_file_text(settings, algorithm))
    sets = [f"{key}={_toml_literal(value)}" for key, value in settings.items()]
    sets += [f"algorithm={algorithm}"] if algorithm else []
    overrides = {**settings, **({"algorithm": algorithm} if algorithm else {})}
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    out: dict[str, Any] = {"file": load_config(path), "--set": load_config(None, sets),
                           "load_config mapping": load_config(empty, overrides)}
    capsys.readouterr()
    assert main(["check", str(empty), *[item for pair in zip(["--set"] * len(sets), sets) for item in pair]]) == 0
    checked = tmp_path / "checked.toml"
    checked.write_text(capsys.readouterr().out)
    out["fedhet check"] = load_config(checked)
    out["sweep"] = plan_sweep(empty, sets=sets, out_dir=tmp_path / "sweep").runs[0].config
    out["tune"] = ConfigTrialRunner(empty, overrides, tmp_path / "trials").base
    (tmp_path / "protocols.toml").write_text('[protocol.p]\nbase = "empty.toml"\nseeds = [1]\n'
                                             '[protocol.p.method.m]\nlr_source = "untuned: test"\n' +
                                             "".join(f"{key} = {_toml_literal(value)}\n" for key, value in overrides.items()))
    protocols = load_protocols(tmp_path / "protocols.toml")

    class Suite:          # plan_protocol reads only the suite's protocols
        pass
    suite = Suite()
    suite.protocols = protocols
    out["claims"] = plan_protocol(suite, "p", ["m"], tmp_path / "claims", tier="default").runs[0].config
    out["Flower"] = config_from_text(config_text(out["--set"]))
    return {name: _flat(config) for name, config in out.items()}


@pytest.mark.parametrize("algorithm", [None, *sorted(ALGORITHMS)])
def test_every_entry_point_resolves_the_same_configuration(tmp_path, capsys, algorithm):
    settings = dict(SETTINGS)
    if algorithm in ("feddyn", "fedspeed", "fedadmm"):    # their servers have no AWARE extension here
        settings = {k: v for k, v in settings.items() if not k.startswith("server.aware")}
    resolved = _resolved_everywhere(tmp_path, settings, algorithm, capsys)
    reference = resolved["file"]
    for key, value in settings.items():          # the file's values are the settings, none dropped
        expected = list(value) if isinstance(value, tuple) else value
        assert reference[key] == expected, key
    if algorithm:
        assert (reference["client.name"], reference["server.name"]) == (ALGORITHMS[algorithm].client,
                                                                        ALGORITHMS[algorithm].server)
    for entry, flat in resolved.items():
        differences = sorted(key for key in set(flat) | set(reference) if flat.get(key) != reference.get(key))
        assert not differences, f"{entry} resolves differently from the file in {differences}"
