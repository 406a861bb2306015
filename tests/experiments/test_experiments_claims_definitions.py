"""The claims under configs/claims/: every claim loads, plans, and compares runs that differ only where it says."""
from __future__ import annotations

from pathlib import Path

import pytest

from fedhet.experiments.claims.definitions import ClaimsError, load_claim, load_protocols, load_suite
from fedhet.experiments.claims.planning import plan_claims, plan_protocol

CLAIMS_DIR = Path(__file__).resolve().parents[2] / "configs" / "claims"
METHOD_SECTIONS = ("algorithm", "client", "server")
NAMING_KEYS = {"run.name", "run.out_dir"}


@pytest.fixture(scope="module")
def suite():
    return load_suite(CLAIMS_DIR)


@pytest.fixture(scope="module")
def configs(suite):
    """(protocol, method, seed) -> flat resolved configuration, for every run the claims plan."""
    flat = {}
    for protocol, methods in suite.needed_methods(suite.claims).items():
        for run in plan_protocol(suite, protocol, methods, "runs/claims", full=False).runs:
            flat[(protocol, run.label, run.seed)] = run.config.to_flat_dict()
    return flat


def _differences(a: dict, b: dict) -> set[str]:
    return {key for key in set(a) | set(b) if key not in NAMING_KEYS and a.get(key) != b.get(key)}


def test_the_suite_covers_the_issue_s_claims(suite):
    ids = {claim.id for claim in suite.claims}
    assert {"fedaware-dirichlet", "aware-eludd", "fedaware-hybrid", "fedspeed-dir06", "fedau-participation"} <= ids
    for protocol in suite.protocols.values():
        assert len(protocol.seeds) >= 3, protocol.name
        for method in protocol.methods.values():
            assert method.lr_source.split(":")[0] in ("paper", "untuned", "tuned")


def test_each_comparison_differs_from_its_baseline_only_in_the_method(suite, configs):
    checked = 0
    for claim in suite.claims:
        for comparison in claim.comparisons:
            m, b = comparison.method, comparison.baseline
            protocol = suite.protocols[m.protocol]
            for seed in protocol.seeds:
                method_config, baseline_config = configs[(m.protocol, m.method, seed)], configs[(b.protocol, b.method, seed)]
                assert method_config["run.seed"] == baseline_config["run.seed"] == seed
                differing = _differences(method_config, baseline_config)
                if m.protocol == b.protocol:
                    # same protocol: only the method's own keys (its component, options, learning rates)
                    outside = {key for key in differing if key.split(".")[0] not in METHOD_SECTIONS}
                    assert not outside, f"{claim.id}: {m.text} vs {b.text} differ in {sorted(outside)}"
                    assert differing, f"{claim.id}: {m.text} and {b.text} are the same configuration"
                else:
                    # same method in two protocols (Statistical Only vs Hybrid+): the method's values are equal but
                    # for its local learning rate (tuned per setting), and the server side (the method proper) is
                    # identical
                    assert m.method == b.method
                    own = {k: v for k, v in protocol.methods[m.method].overrides.items() if k != "client.learning_rate"}
                    other = suite.protocols[b.protocol].methods[b.method].overrides
                    assert own == {k: v for k, v in other.items() if k != "client.learning_rate"}
                    assert not {key for key in differing if key.split(".")[0] in ("algorithm", "server")}
                checked += 1
    assert checked >= 3 * 40


def test_fedspeed_runs_the_released_code_variant(suite, configs):
    runs = [config for (protocol, method, _seed), config in configs.items() if method == "fedspeed"]
    assert runs and all(config["client.variant"] == "released-code" for config in runs)


def test_runs_are_shared_and_named_uniquely(suite):
    plan = plan_claims(suite, suite.claims, "runs/claims", full=False)
    names = [run.name for run in plan.runs]
    assert len(names) == len(set(names))
    # fedaware_dir01/fedavg serves three claims but is planned once per seed
    assert sum(1 for run in plan.runs if run.name.startswith("fedaware_dir01__fedavg__")) == 3
    full = plan_claims(suite, suite.claims, "runs/claims_full", full=True)
    fedau = [run for run in full.runs if run.name.startswith("fedau_cyclic__fedau__")]
    assert len(fedau) == 5 and fedau[0].config.run.rounds == 2000 and fedau[0].config.partition.options.num_clients == 250


def test_full_learning_rates_and_their_source(suite):
    protocol = suite.protocols["fedaware_dir01"]
    assert protocol.overrides("fedavg", full=True)["client.learning_rate"] == 0.01
    assert protocol.lr_source("fedavg", full=True).startswith("paper:")
    assert protocol.lr_source("fedavg", full=False).startswith("tuned:")
    fedau = suite.protocols["fedau_markov"]
    assert fedau.overrides("average_all", full=True)["server.learning_rate"] == 10.0
    assert fedau.lr_source("average_all", full=True) == fedau.lr_source("average_all", full=False)


def _write(tmp_path: Path, protocols: str, claim: str) -> Path:
    (tmp_path / "base.toml").write_text((CLAIMS_DIR / "base" / "fmnist_dir01_uniform.toml").read_text())
    (tmp_path / "protocols.toml").write_text(protocols)
    (tmp_path / "c.toml").write_text(claim)
    return tmp_path


PROTOCOL = """
[protocol.p]
base = "base.toml"
seeds = [1, 2, 3]
[protocol.p.method.a]
lr_source = "untuned: test"
server.name = "fedavg"
[protocol.p.method.b]
lr_source = "paper: test"
server.name = "fedaware"
"""
CLAIM = """
id = "c"
paper = "p"
source = "Table 1"
statement = "s"
paper_protocol = "pp"
here = "h"
metric = "{metric}"
direction = "greater"
[[comparison]]
method = "{method}"
baseline = "p/a"
"""


@pytest.mark.parametrize("protocols, claim, message", [
    (PROTOCOL, CLAIM.format(metric="last_accuracy", method="p/zz"), "protocol p has no method 'zz'"),
    (PROTOCOL, CLAIM.format(metric="last_accuracy", method="q/b"), "no protocol 'q'"),
    (PROTOCOL, CLAIM.format(metric="top5", method="p/b"), "metric = 'top5'; allowed: last_accuracy"),
    (PROTOCOL, CLAIM.format(metric="rounds_to_target", method="p/b"), "use direction = \"less\""),
    (PROTOCOL.replace('lr_source = "paper: test"\n', ""), CLAIM.format(metric="e_ludd", method="p/b"),
     "say where the learning rates come from"),
    (PROTOCOL.replace("seeds = [1, 2, 3]", "seeds = []"), CLAIM.format(metric="e_ludd", method="p/b"),
     "a list of distinct non-negative integers"),
])
def test_bad_definitions_name_the_problem(tmp_path, protocols, claim, message):
    directory = _write(tmp_path, protocols, claim)
    with pytest.raises(ClaimsError, match=None) as error:
        load_claim(directory / "c.toml", load_protocols(directory / "protocols.toml"))
    assert message in str(error.value)
    assert isinstance(error.value, ValueError)
