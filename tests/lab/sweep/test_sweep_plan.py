"""Sweep axes, run names and planning: grids, seeds, variants files, precedence, missing components."""
from __future__ import annotations

import pytest

from fedhet.core.options import ConfigError
from fedhet.lab.sweep.grid import (
    SweepError,
    load_variants,
    parse_grid,
    parse_seeds,
    run_name,
    select_variants,
    split_values,
)
from fedhet.lab.sweep.plan import FINISHED, NEW, RESUME, plan_sweep, run_state


def test_split_values_respects_brackets_and_quotes():
    assert split_values("0.1, 1,10") == ["0.1", "1", "10"]
    assert split_values("[200,200],[100]") == ["[200,200]", "[100]"]
    assert split_values('"a,b",c') == ['"a,b"', "c"]


def test_parse_grid_reads_values_as_set_does():
    axis = parse_grid("server.learning_rate=0.1,1")
    assert axis.key == "server.learning_rate" and axis.texts == ("0.1", "1")
    assert [v.parsed for v in axis.values] == [0.1, 1]
    assert parse_grid("model.hidden=[200,200],[50]").values == ([200, 200], [50])
    assert parse_grid("algorithm=fedavg,scaffold").key == "algorithm"
    for bad, message in (("server.learning_rate", "section.key=v1"), ("server.learning_rate=0.1,,1", "empty value"),
                         ("server.learning_rate=1,1", "listed twice"), ("nonsense.key=1", "unknown section"),
                         ("run.seed=1,2", "--seeds")):
        with pytest.raises(ConfigError, match=message):
            parse_grid(bad)


def test_parse_seeds():
    assert parse_seeds("1,2,3") == (1, 2, 3)
    for bad in ("1,a", "-1", "1,1", ""):
        with pytest.raises(ConfigError):
            parse_seeds(bad)


def test_run_names_are_deterministic_and_safe():
    assert run_name("base", assignments=[("server.learning_rate", "0.1")], seed=2) == \
        "base__server.learning_rate=0.1__seed=2"
    assert run_name("base", variant="fedavgm", seed=1) == "base__fedavgm__seed=1"
    assert run_name("b", assignments=[("model.hidden", "[200, 200]"), ("data.name", '"fmnist"')], seed=0) == \
        "b__model.hidden=_200__200___data.name=fmnist__seed=0"


def test_variants_file(tmp_path):
    path = tmp_path / "v.variants.toml"
    path.write_text('[fedavgm]\nserver.name = "fedavgm"\nserver.momentum = 0.9\n\n[scaffold]\nalgorithm = "scaffold"\n')
    variants = load_variants(path)
    assert [v.name for v in variants] == ["fedavgm", "scaffold"]
    assert variants[0].overrides == {"server.name": "fedavgm", "server.momentum": 0.9}
    assert variants[1].overrides == {"algorithm": "scaffold"}
    assert [v.name for v in select_variants(variants, ["scaffold"])] == ["scaffold"]
    with pytest.raises(ConfigError, match="not in the variants file"):
        select_variants(variants, ["fedyogi"])
    for text, message in (('x = 1\n', "must be a table"), ('[a]\nnonsense.k = 1\n', "unknown section"),
                          ('[a]\nserver = 1\n', "expected a table"), ('', "defines no variant"),
                          ('[a]\nrun.seed = 3\n', "set by the sweep"), ('[a\n', "not valid TOML")):
        path.write_text(text)
        with pytest.raises(ConfigError, match=message):
            load_variants(path)


def test_plan_is_the_cross_product_in_order(tiny_config, tmp_path):
    variants_path = tmp_path / "v.variants.toml"
    variants_path.write_text('[plain]\nserver.name = "fedavg"\n\n[prox]\nclient.name = "fedprox"\nclient.mu = 0.1\n')
    plan = plan_sweep(tiny_config, grids=[parse_grid("client.learning_rate=0.01,0.1")], seeds=[1, 2],
                      variants=load_variants(variants_path), sets=["run.rounds=4"], out_dir=tmp_path / "out")
    names = [run.name for run in plan.runs]
    assert names == [f"tiny__{v}__client.learning_rate={lr}__seed={s}"
                     for v in ("plain", "prox") for lr in ("0.01", "0.1") for s in (1, 2)]
    run = plan.runs[-1]
    assert run.run_dir == tmp_path / "out" / run.name
    assert run.config.run.name == run.name and run.config.run.seed == 2 and run.config.run.rounds == 4
    assert run.config.run.out_dir == str(tmp_path / "out") and run.config.run.progress is False
    assert run.config.client.name == "fedprox" and run.config.client.options.mu == 0.1
    assert run.config.client.options.learning_rate == 0.1
    assert run.label == "prox" and run.assignments == (("client.learning_rate", "0.1"),)
    # Defaults: the file's run.seed, and out_dir = run.out_dir / run.name.
    default = plan_sweep(tiny_config)
    assert [r.name for r in default.runs] == ["tiny__seed=1"] and default.out_dir.as_posix() == "runs/tiny"


def test_precedence_variant_then_set_then_grid(tiny_config, tmp_path):
    variants_path = tmp_path / "v.variants.toml"
    variants_path.write_text('[a]\nclient.learning_rate = 0.3\nclient.batch_size = 8\n')
    plan = plan_sweep(tiny_config, grids=[parse_grid("client.batch_size=4")], variants=load_variants(variants_path),
                      sets=["client.learning_rate=0.2", "client.batch_size=2"])
    options = plan.runs[0].config.client.options
    assert options.learning_rate == 0.2 and options.batch_size == 4


def test_algorithm_axis_replaces_the_base_pair(tiny_config):
    plan = plan_sweep(tiny_config, grids=[parse_grid("algorithm=fedavg,scaffold")])
    pairs = [(r.config.client.name, r.config.server.name) for r in plan.runs]
    assert pairs == [("sgd", "fedavg"), ("scaffold", "scaffold")]


def test_configuration_errors_name_the_setting(tiny_config, tmp_path):
    with pytest.raises(ConfigError, match=r"client.learning_rate.*tiny__client.learning_rate=-1"):
        plan_sweep(tiny_config, grids=[parse_grid("client.learning_rate=0.1,-1")])
    with pytest.raises(ConfigError, match="set by the sweep"):
        plan_sweep(tiny_config, sets=["run.seed=3"])
    with pytest.raises(ConfigError, match="no such file"):
        plan_sweep(tmp_path / "missing.toml")


def test_skip_missing_leaves_out_unknown_components_only(tiny_config, tmp_path):
    variants_path = tmp_path / "v.variants.toml"
    variants_path.write_text('[ok]\nserver.name = "fedavg"\n\n[future]\nserver.name = "not_a_server_yet"\n\n'
                             '[future_option]\nserver.not_an_option = 1\n')
    variants = load_variants(variants_path)
    with pytest.raises(ConfigError, match="not_a_server_yet"):
        plan_sweep(tiny_config, variants=variants)
    plan = plan_sweep(tiny_config, variants=variants, skip_missing=True)
    assert [r.label for r in plan.runs] == ["ok"]
    assert [s.name for s in plan.skipped] == ["tiny__future", "tiny__future_option"]
    assert "unknown server" in plan.skipped[0].reason and "unknown key" in plan.skipped[1].reason
    # A bad value is a real error even with skip_missing.
    variants_path.write_text('[bad]\nclient.learning_rate = -1.0\n')
    with pytest.raises(ConfigError, match="client.learning_rate"):
        plan_sweep(tiny_config, variants=load_variants(variants_path), skip_missing=True)


def test_names_that_collide_after_sanitising_are_an_error(tiny_config):
    with pytest.raises(SweepError, match="same run name"):
        plan_sweep(tiny_config, grids=[parse_grid('run.device="cpu",cpu')])


def test_run_state_of_directories(tiny_config, tmp_path):
    from fedhet.config.schema import config_to_toml

    plan = plan_sweep(tiny_config, out_dir=tmp_path / "out")
    run = plan.runs[0]
    assert run_state(run) == (NEW, None)
    run.run_dir.mkdir(parents=True)
    (run.run_dir / "config.toml").write_text(config_to_toml(run.config))
    assert run_state(run) == (NEW, None)
    (run.run_dir / "checkpoint.pt").write_bytes(b"")
    assert run_state(run) == (RESUME, None)
    (run.run_dir / "summary.json").write_text('{"rounds": 3, "stopped_early": false}')
    assert run_state(run) == (RESUME, None)                  # a summary of fewer rounds than planned
    (run.run_dir / "summary.json").write_text('{"rounds": 6, "stopped_early": false}')
    assert run_state(run) == (FINISHED, None)
    other = plan_sweep(tiny_config, sets=["client.learning_rate=0.5"], out_dir=tmp_path / "out").runs[0]
    state, conflict = run_state(other)
    assert "client.learning_rate" in conflict


def test_checkpoint_cadence_and_progress_are_not_a_conflict(tiny_config, tmp_path):
    # A finished run stays finished when only how often it checkpoints changed (a resume from any round is
    # bitwise the uninterrupted run), while a computing key still conflicts.
    from fedhet.config.schema import config_to_toml

    run = plan_sweep(tiny_config, out_dir=tmp_path / "out").runs[0]
    run.run_dir.mkdir(parents=True)
    (run.run_dir / "config.toml").write_text(config_to_toml(run.config))
    (run.run_dir / "summary.json").write_text('{"rounds": 6, "stopped_early": false}')
    recadenced = plan_sweep(tiny_config, sets=["run.checkpoint_every=50"], out_dir=tmp_path / "out").runs[0]
    assert recadenced.run_dir == run.run_dir and recadenced.config.run.checkpoint_every == 50
    assert run_state(recadenced) == (FINISHED, None)
    relearned = plan_sweep(tiny_config, sets=["client.learning_rate=0.5"], out_dir=tmp_path / "out").runs[0]
    assert "client.learning_rate" in run_state(relearned)[1]
