"""The claims under configs/claims/: every claim loads, plans, and compares runs that differ only where it says."""
from __future__ import annotations

from pathlib import Path

import pytest

from fedhet.lab.claims.definitions import LR_SOURCES, ClaimsError, load_claim, load_protocols, load_suite
from fedhet.lab.claims.planning import plan_claims, plan_protocol

CLAIMS_DIR = Path(__file__).resolve().parents[3] / "configs" / "claims"
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
        for run in plan_protocol(suite, protocol, methods, "runs/claims", tier="default").runs:
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
            assert method.lr_source.split(":")[0] in LR_SOURCES == ("paper", "tuned", "untuned", "pending")


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
                    # an xAWARE arm with its own eta_g search equals the shared arm until the search has run, or when
                    # it chose the shared arm's value (FedYogi+AWARE: 0.01); every other pair differs
                    tuned_own = any(side_method.tuned for side_method in (protocol.methods[m.method],
                                                                         protocol.methods[b.method]))
                    assert differing or tuned_own, f"{claim.id}: {m.text} and {b.text} are the same configuration"
                elif claim.headroom is not None and b == claim.headroom.reference:
                    # the IID reference of the headroom gate: another method on another partition, shown only
                    assert not comparison.primary
                    assert {key.split(".")[0] for key in differing} <= {"partition", *METHOD_SECTIONS}
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
    plan = plan_claims(suite, suite.claims, "runs/claims", tier="default")
    names = [run.name for run in plan.runs]
    assert len(names) == len(set(names))
    # fedaware_dir01/fedavg serves three claims but is planned once per seed
    seeds = suite.protocols["fedaware_dir01"].seeds
    assert sum(1 for run in plan.runs if run.name.startswith("fedaware_dir01__fedavg__")) == len(seeds)
    full = plan_claims(suite, suite.claims, "runs/claims_full", tier="full")
    cyclic = suite.protocols["fedau_cyclic"]
    fedau = [run for run in full.runs if run.name.startswith("fedau_cyclic__fedau__")]
    assert len(fedau) == len(cyclic.full_seeds)
    assert fedau[0].config.run.rounds == cyclic.full["run.rounds"]


def test_every_tier_value_reaches_the_planned_runs(suite):
    """The protocol's tier table, then the method's own, win over the method's keys (module docstring)."""
    for tier in ("quick", "default", "full"):
        plan = plan_claims(suite, suite.claims, "runs/x", tier=tier)
        for run in plan.runs:
            protocol = suite.protocols[run.name.split("__")[0]]
            flat = run.config.to_flat_dict()
            wanted = {**protocol.tier_values(tier), **protocol.methods[run.label].tiers.get(tier, {})}
            assert {key: flat[key] for key in wanted} == wanted, run.name
            assert run.seed in protocol.run_seeds(tier=tier)


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
quantifier = "all"
delta = 0.01
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
    (PROTOCOL.replace("seeds = [1, 2, 3]", "seeds = [1, 2, 3]\nquick_run = {}"), CLAIM.format(metric="e_ludd", method="p/b"),
     "unknown key quick_run; allowed: base, full, full_lr_source, full_seeds, method, methods_from, quick, "
     "quick_lr_source, quick_seeds, regime, seeds, set, title, tuning_seed"),
    (PROTOCOL.replace("seeds = [1, 2, 3]", "seeds = [1, 2, 3]\nregime = { rounds = 300 }"),
     CLAIM.format(metric="e_ludd", method="p/b"), "'rounds': a dotted configuration key"),
    (PROTOCOL.replace("seeds = [1, 2, 3]", "seeds = [1, 2, 3]\nregime = { \"run.rounds\" = [300] }"),
     CLAIM.format(metric="e_ludd", method="p/b"), "run.rounds = [300]: a number"),
    (PROTOCOL.replace("seeds = [1, 2, 3]", "seeds = [1, 2, 3]\ntuning_seed = 2"), CLAIM.format(metric="e_ludd", method="p/b"),
     "tuning_seed = 2 is also an evaluation seed"),
    (PROTOCOL, CLAIM.format(metric="e_ludd", method="p/b").replace('quantifier = "all"', 'quantifier = "some"'),
     "quantifier = 'some': as the paper states the claim; allowed: all, most"),
    (PROTOCOL, CLAIM.format(metric="e_ludd", method="p/b").replace("delta = 0.01\n", ""), "delta = ... is required"),
    (PROTOCOL, CLAIM.format(metric="e_ludd", method="p/b").replace("delta = 0.01", "delta = 0"),
     "delta = 0: positive for a greater comparison"),
    (PROTOCOL, CLAIM.format(metric="e_ludd", method="p/b") + 'role = "main"\n', "role = 'main'; allowed: primary, reported"),
    (PROTOCOL, CLAIM.format(metric="e_ludd", method="p/b") + 'role = "reported"\n', "no primary comparison"),
    (PROTOCOL, CLAIM.format(metric="e_ludd", method="p/b") + 'target = 0.8\n', "target is for a rounds_to_target"),
])
def test_bad_definitions_name_the_problem(tmp_path, protocols, claim, message):
    directory = _write(tmp_path, protocols, claim)
    with pytest.raises(ClaimsError, match=None) as error:
        load_claim(directory / "c.toml", load_protocols(directory / "protocols.toml"))
    assert message in str(error.value)
    assert isinstance(error.value, ValueError)


TIERED = PROTOCOL.replace("seeds = [1, 2, 3]", """seeds = [1, 2, 3]
quick_seeds = [1]
set = { "run.rounds" = 60, "client.epochs" = 1 }
quick = { "run.rounds" = 4, "client.epochs" = 1 }
full = { "run.rounds" = 500 }
regime = { "run.rounds" = 300, "client.epochs" = 3, "data.name" = "fmnist" }
tuning_seed = 0""")


def test_tiers_apply_their_values_over_the_methods(tmp_path):
    directory = _write(tmp_path, TIERED, CLAIM.format(metric="e_ludd", method="p/b"))
    protocol = load_protocols(directory / "protocols.toml")["p"]
    assert protocol.run_seeds(tier="quick") == (1,) and protocol.run_seeds(tier="default") == (1, 2, 3)
    assert protocol.run_seeds(tier="full") == (1, 2, 3) and protocol.tuning_seed == 0
    assert protocol.overrides("b", tier="quick") == {"server.name": "fedaware", "run.rounds": 4, "client.epochs": 1}
    assert protocol.overrides("b", tier="default") == {"run.rounds": 60, "client.epochs": 1, "server.name": "fedaware"}
    assert protocol.overrides("b", tier="full")["run.rounds"] == 500
    with pytest.raises(ClaimsError, match="--tier fast: allowed: quick, default, full"):
        protocol.run_seeds(tier="fast")


@pytest.mark.parametrize("values, below", [
    ({"run.rounds": 300, "client.epochs": 3, "data.name": "fmnist"}, []),
    ({"run.rounds": 500, "client.epochs": 5, "data.name": "fmnist"}, []),
    ({"run.rounds": 299, "client.epochs": 3, "data.name": "fmnist"}, ["run.rounds = 299 < 300"]),
    # local work compared numerically; an unset epochs count (local_steps instead) is not at the regime
    ({"run.rounds": 300, "client.epochs": None, "data.name": "fmnist"}, ["client.epochs = None < 3"]),
    ({"run.rounds": 300, "client.epochs": 3, "data.name": "cifar10"}, ["data.name = 'cifar10' != 'fmnist'"]),
])
def test_below_regime_compares_each_key(tmp_path, values, below):
    directory = _write(tmp_path, TIERED, CLAIM.format(metric="e_ludd", method="p/b"))
    protocol = load_protocols(directory / "protocols.toml")["p"]
    assert protocol.below_regime(values) == below
    with pytest.raises(ClaimsError, match="'client.epochs' is not a configuration key"):
        protocol.below_regime({"run.rounds": 300})


def _suite_dir(directory: Path, protocols: str, claim: str) -> Path:
    """A claims directory for load_suite: the base file under base/ (every other *.toml is a claim)."""
    (directory / "base").mkdir(parents=True)
    (directory / "base" / "base.toml").write_text((CLAIMS_DIR / "base" / "fmnist_dir01_uniform.toml").read_text())
    (directory / "protocols.toml").write_text(protocols.replace('base = "base.toml"', 'base = "base/base.toml"'))
    (directory / "c.toml").write_text(claim)
    return directory


def test_quick_tier_and_missing_regime_never_give_a_verdict(tmp_path):
    from fedhet.lab.claims.planning import NO_REGIME_GAP, QUICK_GAP, regime_gaps

    suite = load_suite(_suite_dir(tmp_path / "tiered", TIERED, CLAIM.format(metric="e_ludd", method="p/b")))
    # `set` gives 60 rounds of 1 epoch: below a 300-round, 3-epoch regime in the default tier
    default = regime_gaps(suite, plan_claims(suite, suite.claims, tmp_path / "runs", tier="default"), tier="default")
    assert default == {key: ["run.rounds = 60 < 300", "client.epochs = 1 < 3"] for key in (("p", "a"), ("p", "b"))}
    full = regime_gaps(suite, plan_claims(suite, suite.claims, tmp_path / "runs", tier="full"), tier="full")
    assert full == {key: ["client.epochs = 1 < 3"] for key in (("p", "a"), ("p", "b"))}
    at_regime = TIERED.replace('full = { "run.rounds" = 500 }', 'full = { "run.rounds" = 500, "client.epochs" = 3 }')
    suite = load_suite(_suite_dir(tmp_path / "at", at_regime, CLAIM.format(metric="e_ludd", method="p/b")))
    assert regime_gaps(suite, plan_claims(suite, suite.claims, tmp_path / "runs", tier="full"), tier="full") == {}
    quick = regime_gaps(suite, plan_claims(suite, suite.claims, tmp_path / "runs", tier="quick"), tier="quick")
    assert quick == {("p", "a"): [QUICK_GAP], ("p", "b"): [QUICK_GAP]}
    bare = _suite_dir(tmp_path / "bare", PROTOCOL, CLAIM.format(metric="e_ludd", method="p/b"))
    suite = load_suite(bare)
    gaps = regime_gaps(suite, plan_claims(suite, suite.claims, tmp_path / "runs2", tier="default"), tier="default")
    assert gaps == {("p", "a"): [NO_REGIME_GAP], ("p", "b"): [NO_REGIME_GAP]}
