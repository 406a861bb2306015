"""Claims definitions and exports: a regime value of the wrong type is refused when the definitions
load (not turned into "not tested" for every claim), and `claims export` never overwrites the
configuration of a run already in its --out directory, nor writes under a live `claims run`."""
from __future__ import annotations

import io

import pytest

from fedhet.engine.rundir_lock import DirectoryLock, RunDirectoryInUseError
from fedhet.error_lines import error_line
from fedhet.lab.claims.definitions import ClaimsError, load_protocols
from fedhet.lab.commands.claims import export_command
from small_run import small_toml

PROTOCOLS = """
[protocol.tiny]
base = "base/tiny.toml"
title = "Synthetic, 12 clients"
seeds = [1, 2]
quick_seeds = [1]
quick = {{ "run.rounds" = 4 }}
regime = {{ {regime} }}

[protocol.tiny.method.fedavg]
lr_source = "untuned: a test"
server.name = "fedavg"

[protocol.tiny.method.fedavgm]
lr_source = "untuned: a test"
server.name = "fedavgm"
"""

CLAIM = """
id = "momentum-not-worse"
paper = "a test"
source = "Table 0"
statement = "FedAvgM is not worse than FedAvg."
paper_protocol = "none"
here = "Synthetic"
metric = "last_accuracy"
direction = "not_worse"
quantifier = "all"
delta = 0.0
margin = 0.01

[[comparison]]
method = "tiny/fedavgm"
baseline = "tiny/fedavg"
paper = "1 vs 1"
"""


def _claims(tmp_path, regime: str = '"run.rounds" = 6'):
    directory = tmp_path / "claims"
    (directory / "base").mkdir(parents=True)
    (directory / "base" / "tiny.toml").write_text(small_toml(name="tiny", rounds=6, backend="sequential"))
    (directory / "protocols.toml").write_text(PROTOCOLS.format(regime=regime))
    (directory / "claim.toml").write_text(CLAIM)
    return directory


@pytest.mark.parametrize("regime,kind", [('"run.rounds" = "many"', "number"), ('"client.epochs" = true', "number"),
                                         ('"run.dtype" = 64', "text")])
def test_a_regime_value_of_the_wrong_type_is_refused_when_the_definitions_load(tmp_path, regime, kind):
    directory = _claims(tmp_path, regime)
    with pytest.raises(ClaimsError, match=f"is a {kind} option, so its regime value must be a {kind}") as caught:
        load_protocols(directory / "protocols.toml")
    assert error_line(caught.value)[1] == 2


def test_regime_values_of_the_keys_type_are_accepted(tmp_path):
    directory = _claims(tmp_path, '"run.rounds" = 6, "client.name" = "sgd", "server.aware" = false')
    assert load_protocols(directory / "protocols.toml")["tiny"].regime["run.rounds"] == 6


def test_export_never_overwrites_an_existing_runs_different_config(tmp_path):
    directory = _claims(tmp_path)
    out = tmp_path / "out"
    assert export_command(out=str(out), claims_dir=str(directory), stdout=io.StringIO(), stderr=io.StringIO()) == 0
    config = out / "tiny" / "tiny__fedavg__seed=1" / "config.toml"
    default_tier = config.read_bytes()
    # the same export again: a no-op
    assert export_command(out=str(out), claims_dir=str(directory), stdout=io.StringIO(), stderr=io.StringIO()) == 0
    stderr = io.StringIO()
    assert export_command(out=str(out), claims_dir=str(directory), tier="quick", stdout=io.StringIO(),
                          stderr=stderr) == 2
    assert "already holds a different configuration" in stderr.getvalue() and "another --out" in stderr.getvalue()
    assert config.read_bytes() == default_tier


def test_export_is_refused_while_a_claims_run_holds_the_directory(tmp_path):
    directory = _claims(tmp_path)
    out = tmp_path / "live"
    with DirectoryLock(out, what="sweep directory"):          # what a live `claims run` holds
        with pytest.raises(RunDirectoryInUseError):
            export_command(out=str(out), claims_dir=str(directory), stdout=io.StringIO(), stderr=io.StringIO())
    assert not (out / "tiny").exists()
