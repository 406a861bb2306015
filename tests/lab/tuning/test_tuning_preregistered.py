"""The claims' protocols and pre-registered tuning plan (configs/claims/protocols.toml, tuning.toml), read by
fedhet.lab.tuning.preregistered: paired comparisons differ only in the method and share every tuned value, the
tiers sit where the regime says, the tuning seed is disjoint, and the plan refuses what it promises not to do."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

import fedhet.components  # noqa: F401  (registers the components the configs name)
from fedhet.config.schema import read_toml_file
from fedhet.lab.sweep.plan import build_run_config
from fedhet.lab.tuning.errors import TuneError
from fedhet.lab.tuning.preregistered import load_plan, load_protocol_tables

CLAIMS_DIR = Path(__file__).resolve().parents[3] / "configs" / "claims"
NAMING_KEYS = {"run.name", "run.out_dir"}
METHOD_SECTIONS = ("algorithm", "client", "server")


@pytest.fixture(scope="module")
def protocols():
    return load_protocol_tables(CLAIMS_DIR / "protocols.toml")


@pytest.fixture(scope="module")
def plan():
    return load_plan(CLAIMS_DIR / "tuning.toml")


@pytest.fixture(scope="module")
def comparisons():
    sides = []
    for path in sorted(CLAIMS_DIR.glob("[0-9]_*.toml")):
        for table in read_toml_file(path, key="claim")["comparison"]:
            sides.append((path.name, table["method"], table["baseline"]))
    return sides


def _config(protocols, side: str, tier: str, seed: int):
    protocol, method = side.split("/")
    tables = protocols[protocol]
    raw = read_toml_file(tables.base, key="config")
    return build_run_config(raw, {**tables.overrides(method, tier), "run.seed": seed}).to_flat_dict()


def _root(protocols, side: str) -> str:
    """The method a side takes its values from (following same_as)."""
    protocol, method = side.split("/")
    table = protocols[protocol].methods[method]
    return _root(protocols, table["same_as"]) if "same_as" in table else side


def test_every_compared_method_exists(protocols, comparisons):
    assert len(comparisons) >= 40
    for _claim, *sides in comparisons:
        for side in sides:
            protocol, method = side.split("/")
            assert method in protocols[protocol].methods, side


@pytest.mark.parametrize("tier", ["default", "quick", "full"])
def test_paired_comparisons_differ_only_in_the_method_and_share_every_tuned_value(protocols, plan, comparisons, tier):
    tuned_keys = {search.target: {knob.key for knob in search.knobs} for search in plan.searches}
    paired = 0
    for claim, method, baseline in comparisons:
        a, b = _config(protocols, method, tier, 1), _config(protocols, baseline, tier, 1)
        differing = {k for k in set(a) | set(b) if k not in NAMING_KEYS and a.get(k) != b.get(k)}
        pm, pb = method.split("/")[0], baseline.split("/")[0]
        # Keys a side searches apart from its same_as reference (an xAWARE arm's eta_g): they may differ, and
        # the two sides may be the same configuration until that search has run (lr_source "pending") or when
        # it chose the reference's value (FedYogi+AWARE's 0.01 against the shared arm's).
        own = {k for side in (method, baseline)
               for k in protocols[side.split("/")[0]].methods[side.split("/")[1]].get("tuned", ())}
        if pm == pb:
            # Same protocol: only the method's own keys differ (its component, its options, its step sizes).
            outside = {k for k in differing if k.split(".")[0] not in METHOD_SECTIONS}
            assert not outside, f"{claim}: {method} vs {baseline} differ in {sorted(outside)}"
            assert differing or own, f"{claim}: {method} and {baseline} are the same configuration"
        if _root(protocols, method) == _root(protocols, baseline):
            paired += 1
            root = _root(protocols, method)
            # Every value the shared method sets, and every key its search tunes, is the same on both sides,
            # but for the keys a side declares tuned.
            root_protocol, root_method = root.split("/")
            shared = (set(protocols[root_protocol].overrides(root_method, tier)) | tuned_keys.get(root, set())) - own
            assert not (shared & differing), f"{claim}: {method} vs {baseline} differ in {sorted(shared & differing)}"
            if pm == pb:      # xAWARE vs raw: the only change is the AWARE extension and the arm's own eta_g
                assert differing <= {"server.aware", "server.aware_alpha"} | own, (claim, sorted(differing))
            else:             # the same method in two hybrid settings: only the setting differs (partition,
                # and Hybrid+'s client system), never the server side
                assert not {k for k in differing if k.split(".")[0] in ("algorithm", "server")}, (claim, sorted(differing))
    assert paired >= 8 + 2        # four xAWARE pairs on two metrics, two degradation pairs


def test_paired_arms_take_their_values_structurally(protocols, plan):
    searched = {s.target: s for s in plan.searches}
    for raw in ("fedavg", "fedavgm", "fedprox", "fedyogi"):
        arm, shared = (protocols["fedaware_dir01"].methods[f"{raw}_aware{suffix}"] for suffix in ("", "_shared"))
        assert arm["same_as"] == shared["same_as"] == f"fedaware_dir01/{raw}"
        assert arm["server.aware_alpha"] == shared["server.aware_alpha"] == 0.5        # AISTATS Appendix B.1
        assert shared["lr_source"].startswith(protocols["fedaware_dir01"].methods[raw]["lr_source"])
        # the tuned arm searches eta_g on its raw arm's grid, with its raw arm's criterion; the shared arm does not
        assert arm["tuned"] == ["server.learning_rate"] and f"fedaware_dir01/{raw}_aware_shared" not in searched
        own, reference = searched[f"fedaware_dir01/{raw}_aware"], searched[f"fedaware_dir01/{raw}"]
        step = next(k for k in reference.knobs if k.key == "server.learning_rate")
        assert [k.values for k in own.knobs] == [step.values] and own.criterion == reference.criterion
    for setting in ("fedaware_shards", "fedaware_hybrid_plus"):
        for method in ("fedavg", "fedaware"):
            assert protocols[setting].methods[method]["same_as"] == f"fedaware_dir01/{method}"


def test_tiers_sit_where_the_regime_says(protocols):
    raw = read_toml_file(CLAIMS_DIR / "protocols.toml", key="protocols")["protocol"]
    for name, tables in protocols.items():
        regime = raw[name]["regime"]
        assert regime, name
        method = next(iter(tables.methods))
        configs = {tier: build_run_config(read_toml_file(tables.base, key="config"),
                                          tables.overrides(method, tier)).to_flat_dict() for tier in ("default", "quick", "full")}
        for key, least in regime.items():
            assert configs["default"][key] >= least and configs["full"][key] >= least, (name, key)
        assert any(configs["quick"][key] < least for key, least in regime.items()), f"{name}: quick is not below the regime"
        for tier in ("default", "full"):
            rounds, every = configs[tier]["run.rounds"], configs[tier]["run.eval_every"]
            # The last-10% window averages at least 20 evaluations (FedAU) or every round of it (30).
            assert math.ceil(0.1 * rounds) // every >= 20, (name, tier)
        assert len(tables.seeds["default"]) == (10 if name.startswith("fedau") else 5) and tables.tuning_seed not in {
            s for seeds in tables.seeds.values() for s in seeds}


def test_the_paper_regime_s_local_work(protocols):
    fedaware = _config(protocols, "fedaware_dir01/fedaware", "default", 1)
    assert (fedaware["client.learning_rate"], fedaware["client.epochs"], fedaware["client.batch_size"],
            fedaware["run.rounds"], fedaware["participation.explore"]) == (0.01, 3, 64, 300, True)
    assert _config(protocols, "fedaware_dir01/fedaware", "full", 1)["run.rounds"] == 500
    fedau = _config(protocols, "fedau_cyclic/fedau", "default", 1)
    assert (fedau["client.steps"], fedau["client.batch_size"], fedau["run.rounds"]) == (5, 16, 1000)


@pytest.mark.parametrize("tier, rounds", [("default", 300), ("quick", 30), ("full", 1500)])
def test_fedspeed_decays_end_at_the_paper_s_end_of_run_learning_rate(protocols, tier, rounds):
    paper = {"fedavg": 0.998, "fedprox": 0.998, "scaffold": 0.998, "feddyn": 0.9995, "fedspeed": 0.9995}
    for method, decay in paper.items():
        config = _config(protocols, f"fedspeed_dir06/{method}", tier, 1)
        assert config["run.rounds"] == rounds and config["client.learning_rate"] == 0.1
        end = config["client.learning_rate"] * config["client.lr_decay"] ** rounds
        assert end == pytest.approx(0.1 * decay ** 1500, rel=2e-3), (method, tier)


def test_the_plan_searches_every_raw_method_on_the_same_step_size_grid(plan):
    searched = {s.target: s for s in plan.searches}
    for method in ("fedavg", "fedavgm", "fedprox", "fedaware"):
        assert "eta_g" in [k.name for k in searched[f"fedaware_dir01/{method}"].knobs]
    assert [k.name for k in searched["fedaware_dir01/fedyogi"].knobs] == ["yogi_eta_g"]
    for search in plan.searches:
        assert search.criterion.round is None          # read at the horizon: tuning horizon = evaluation horizon
        assert not search.criterion.text.startswith("test")
        if search.protocol.startswith("fedau"):
            assert search.criterion.metric == "global_train_loss_last10" and len(search.stages) == 2
            assert search.seeds == (0, 11) and search.stability == ("fedau_markov", "fedau_cyclic")
        else:
            assert search.criterion.metric == "val_accuracy_last10"


def _write(tmp_path, protocols_text, plan_text):
    (tmp_path / "base.toml").write_text((CLAIMS_DIR / "base" / "fmnist_dir01_uniform.toml").read_text())
    (tmp_path / "protocols.toml").write_text(protocols_text)
    (tmp_path / "tuning.toml").write_text(plan_text)
    return tmp_path / "tuning.toml"


PROTOCOLS = """
[protocol.p]
base = "base.toml"
seeds = [1, 2, 3]
tuning_seed = {seed}
[protocol.p.method.a]
lr_source = "pending: test"
server.learning_rate = 1.0
[protocol.p.method.b]
same_as = "p/a"
server.aware = true
"""
PLAN = """
max_extensions = 1
[knob.eta_g]
key = "server.learning_rate"
values = [0.5, 1.0]
extend = true
[search."p/{method}"]
criterion = "{criterion}"
stages = [["eta_g"]]
"""


@pytest.mark.parametrize("seed, method, criterion, message", [
    (1, "a", "val_accuracy_last10", "needs a tuning_seed that is none of its evaluation seeds"),
    (0, "b", "val_accuracy_last10", "a paired arm (same_as = 'p/a') takes its reference's values; it may search "
                                    "only the keys it declares in tuned"),
    (0, "a", "test_accuracy", "the test set is never a selection criterion"),
    (0, "a", "global_train_loss@100", "write it without @ROUND"),
    (0, "z", "val_accuracy_last10", "no method 'p/z'"),
])
def test_the_plan_refuses_what_the_pre_registration_rules_out(tmp_path, seed, method, criterion, message):
    path = _write(tmp_path, PROTOCOLS.format(seed=seed), PLAN.format(method=method, criterion=criterion))
    with pytest.raises(TuneError) as error:
        load_plan(path)
    assert message in str(error.value)


def test_an_arm_that_changes_its_reference_s_value_is_refused(tmp_path):
    protocols = PROTOCOLS.format(seed=0).replace("server.aware = true", "server.aware = true\nserver.learning_rate = 2.0")
    path = _write(tmp_path, protocols, PLAN.format(method="a", criterion="val_accuracy_last10"))
    with pytest.raises(TuneError, match=r"same_as = 'p/a' but it changes server.learning_rate \(server.learning_rate = 1.0 there\)"):
        load_plan(path)


def test_a_paired_arm_searches_the_keys_it_declares_tuned_and_nothing_else(tmp_path):
    protocols = PROTOCOLS.format(seed=0).replace(
        'server.aware = true', 'server.aware = true\ntuned = ["server.learning_rate"]\nlr_source = "pending: own"')
    plan = load_plan(_write(tmp_path, protocols, PLAN.format(method="b", criterion="val_accuracy_last10")))
    (search,) = plan.searches
    assert search.target == "p/b" and [k.key for k in search.knobs] == ["server.learning_rate"]
    assert plan.protocols["p"].overrides("b", "default") == {"server.learning_rate": 1.0, "server.aware": True}
    other = PLAN.format(method="b", criterion="val_accuracy_last10").replace('key = "server.learning_rate"',
                                                                           'key = "client.learning_rate"')
    with pytest.raises(TuneError, match=r"declared: \['server.learning_rate'\]; searched: \['client.learning_rate'\]"):
        load_plan(_write(tmp_path, protocols, other))


def test_the_iid_reference_differs_from_the_fedspeed_protocol_in_its_partition_only(protocols):
    dirichlet = _config(protocols, "fedspeed_dir06/fedavg", "default", 1)
    iid = _config(protocols, "fedspeed_iid/fedavg", "default", 1)
    differing = {k for k in set(dirichlet) | set(iid) if k not in NAMING_KEYS and dirichlet.get(k) != iid.get(k)}
    assert {k.split(".")[0] for k in differing} == {"partition"} and iid["partition.name"] == "iid"
