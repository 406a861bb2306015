"""``algorithm = X`` means the same at every entry point (issue 23 item 1, docs/design.md,
"`algorithm = X`"): it selects X's client and server; an override replaces the pair a file names; one
configuration naming ``algorithm`` and a different ``client.name`` / ``server.name`` is refused in one
line naming both; the summary and ``config.toml`` record the pair that ran."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import fedhet.components  # noqa: F401  (registers every algorithm before the parametrisations read them)
from fedhet.algorithms import server_for
from fedhet.cli import main
from fedhet.config.schema import config_to_toml, load_config, resolve_config
from fedhet.core.options import ConfigError
from fedhet.core.registry import ALGORITHMS, CLIENT_SOLVERS
from small_run import small_toml

# A file that names a pair (plain SGD + FedAvg), as `fedhet init`'s quickstart does.
PAIR_FILE = small_toml(name="pair", rounds=3, eval_every=1, progress=False) + '\nname = "sgd"\n\n[server]\nname = "fedavg"\n'


@pytest.fixture
def pair_file(tmp_path) -> Path:
    path = tmp_path / "pair.toml"
    path.write_text(PAIR_FILE)
    return path


def _pair(config) -> tuple[str, str]:
    return config.client.name, config.server.name


def _expected(algorithm: str) -> tuple[str, str]:
    return ALGORITHMS[algorithm].client, ALGORITHMS[algorithm].server


# --- one mapping: a file ------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_a_file_naming_only_the_algorithm_runs_its_pair(tmp_path, algorithm):
    path = tmp_path / "a.toml"
    path.write_text(f'algorithm = "{algorithm}"\n' + small_toml(name="a"))
    config = load_config(path)
    assert (config.algorithm, _pair(config)) == (algorithm, _expected(algorithm))


def test_a_file_naming_the_algorithm_and_its_own_pair_loads(tmp_path):
    path = tmp_path / "a.toml"
    path.write_text('algorithm = "scaffold"\n' + small_toml(name="a") + '\nname = "scaffold"\n\n[server]\nname = "scaffold"\n')
    assert _pair(load_config(path)) == ("scaffold", "scaffold")


@pytest.mark.parametrize("section, name", [("client", "sgd"), ("server", "fedavg")])
def test_a_file_naming_the_algorithm_and_another_pair_is_refused_naming_both(tmp_path, section, name):
    raw = {"algorithm": "scaffold", section: {"name": name}}
    with pytest.raises(ConfigError) as caught:
        resolve_config(raw)
    message = str(caught.value)
    assert "\n" not in message
    assert f"{section}.name = '{name}'" in message and "algorithm = 'scaffold'" in message


# --- overrides: --set, load_config, with_overrides -------------------------------------------------


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_a_load_config_override_replaces_the_file_s_pair(pair_file, algorithm):
    config = load_config(pair_file, [f"algorithm={algorithm}"])
    assert (config.algorithm, _pair(config)) == (algorithm, _expected(algorithm))
    assert _pair(load_config(pair_file, {"algorithm": algorithm})) == _expected(algorithm)


def test_a_quoted_override_names_the_same_algorithm(pair_file):
    assert _pair(load_config(pair_file, ['algorithm="scaffold"'])) == ("scaffold", "scaffold")


def test_an_override_naming_the_algorithm_and_another_client_is_refused(pair_file):
    with pytest.raises(ConfigError, match=r"client.name = 'sgd': conflicts with algorithm = 'scaffold'"):
        load_config(pair_file, ["algorithm=scaffold", "client.name=sgd"])


def test_an_override_of_one_half_on_a_file_naming_the_algorithm_is_refused(tmp_path):
    path = tmp_path / "a.toml"
    path.write_text('algorithm = "fedaware"\n' + small_toml(name="a"))
    with pytest.raises(ConfigError, match=r"server.name = 'fedavg': conflicts with algorithm = 'fedaware'"):
        load_config(path, ["server.name=fedavg"])


def test_with_overrides_and_the_saved_config_agree(pair_file):
    config = load_config(pair_file).with_overrides({"algorithm": "feddyn"})
    assert _pair(config) == ("feddyn", "feddyn")
    # config.toml records the algorithm and the pair that ran; it loads back to the same config.
    saved = pair_file.parent / "saved.toml"
    saved.write_text(config_to_toml(config))
    assert load_config(saved) == config


def test_fedhet_run_set_algorithm_runs_and_records_the_algorithm_s_pair(pair_file, tmp_path):
    """The issue's reproduction: ``--set algorithm=scaffold`` on a file naming sgd + fedavg runs
    SCAFFOLD (the numbers of a file naming SCAFFOLD's pair), and records it."""
    out = tmp_path / "runs"
    assert main(["run", str(pair_file), "--set", "algorithm=scaffold", "--set", "run.name=a",
                 "--set", f"run.out_dir={out}", "--quiet"]) == 0
    explicit = tmp_path / "explicit.toml"
    explicit.write_text(PAIR_FILE.replace('name = "sgd"', 'name = "scaffold"').replace('name = "fedavg"',
                                                                                       'name = "scaffold"'))
    assert main(["run", str(explicit), "--set", "run.name=b", "--set", f"run.out_dir={out}", "--quiet"]) == 0
    assert main(["run", str(pair_file), "--set", "run.name=c", "--set", f"run.out_dir={out}", "--quiet"]) == 0
    a, b, c = (json.loads((out / name / "summary.json").read_text()) for name in "abc")
    assert (a["algorithm"], a["client"], a["server"]) == ("scaffold", "scaffold", "scaffold")
    assert a["final_accuracy"] == b["final_accuracy"]
    assert (c["client"], c["server"]) == ("sgd", "fedavg")
    saved = load_config(out / "a" / "config.toml")
    assert (saved.algorithm, _pair(saved)) == ("scaffold", ("scaffold", "scaffold"))


def test_fedhet_run_refuses_a_conflicting_pair_in_one_line(tmp_path, capsys):
    path = tmp_path / "a.toml"
    path.write_text('algorithm = "scaffold"\n' + PAIR_FILE)
    assert main(["run", str(path), "--set", f"run.out_dir={tmp_path / 'runs'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "client.name = 'sgd'" in err and "algorithm = 'scaffold'" in err
    assert not (tmp_path / "runs").exists()


# --- sweep, tune, claims, Flower ------------------------------------------------------------------


def test_a_sweep_grid_over_algorithm_runs_each_algorithm_s_pair(pair_file, tmp_path):
    from fedhet.lab.sweep.grid import parse_grid
    from fedhet.lab.sweep.plan import plan_sweep

    plan = plan_sweep(pair_file, grids=[parse_grid("algorithm=fedavg,scaffold,fedaware")], out_dir=tmp_path / "s")
    assert [(run.config.algorithm, _pair(run.config)) for run in plan.runs] == [
        (name, _expected(name)) for name in ("fedavg", "scaffold", "fedaware")]


def test_a_sweep_variant_and_set_override_the_pair_as_run_set_does(pair_file, tmp_path):
    from fedhet.lab.sweep.grid import Variant
    from fedhet.lab.sweep.plan import plan_sweep

    plan = plan_sweep(pair_file, variants=[Variant("s", {"algorithm": "scaffold"})], out_dir=tmp_path / "s")
    assert _pair(plan.runs[0].config) == _pair(load_config(pair_file, ["algorithm=scaffold"]))
    plan = plan_sweep(pair_file, sets=["algorithm=fednova"], out_dir=tmp_path / "t")
    assert _pair(plan.runs[0].config) == ("sgd", "fednova")


def test_a_sweep_refuses_an_algorithm_and_a_conflicting_name(pair_file, tmp_path):
    from fedhet.lab.sweep.grid import parse_grid
    from fedhet.lab.sweep.plan import plan_sweep

    with pytest.raises(ConfigError, match="conflicts with algorithm = 'scaffold'"):
        plan_sweep(pair_file, grids=[parse_grid("algorithm=scaffold")], sets=["client.name=sgd"],
                   out_dir=tmp_path / "s")


def test_a_tuning_trial_with_an_algorithm_runs_its_pair(pair_file, tmp_path):
    from fedhet.lab.tuning.trials import ConfigTrialRunner

    runner = ConfigTrialRunner(pair_file, {"algorithm": "scaffold"}, tmp_path / "trials")
    assert _pair(runner.base) == ("scaffold", "scaffold")
    runner = ConfigTrialRunner(pair_file, {}, tmp_path / "trials")
    assert _pair(runner.config({"algorithm": "feddyn"}, "trial-0000")) == ("feddyn", "feddyn")


def test_a_claims_method_naming_an_algorithm_runs_its_pair(pair_file, tmp_path):
    from fedhet.lab.claims.definitions import load_protocols
    from fedhet.lab.claims.planning import plan_protocol

    (tmp_path / "protocols.toml").write_text(
        '[protocol.p]\nbase = "pair.toml"\nseeds = [1]\n'
        '[protocol.p.method.avg]\nlr_source = "untuned: test"\n'
        '[protocol.p.method.scaf]\nlr_source = "untuned: test"\nalgorithm = "scaffold"\n')
    protocols = load_protocols(tmp_path / "protocols.toml")

    class Suite:      # plan_protocol reads only the protocols of a suite
        pass
    suite = Suite()
    suite.protocols = protocols
    runs = plan_protocol(suite, "p", ["avg", "scaf"], tmp_path / "out", tier="default").runs
    assert {run.label: _pair(run.config) for run in runs} == {"avg": ("sgd", "fedavg"), "scaf": ("scaffold", "scaffold")}


def test_the_flower_bridge_builds_the_algorithm_s_pair(pair_file):
    from fedhet.engine.assembly import simulator_from_config
    from fedhet.flower.build import build_federation, config_from_text, config_text

    config = config_from_text(config_text(load_config(pair_file, ["algorithm=scaffold"])))
    assert _pair(config) == ("scaffold", "scaffold")
    # What the ServerApp runs (fedhet.flower.server_app: the runner's assembly on the Flower federation).
    components = simulator_from_config(config, build_federation(config))
    solver = CLIENT_SOLVERS.get("scaffold").factory(config.client.options)
    assert type(components.solver) is type(solver)
    assert type(components.server) is type(server_for(solver, "scaffold", config.server.options))
