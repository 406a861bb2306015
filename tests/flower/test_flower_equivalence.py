"""The Flower apps reproduce `fedhet run` bit for bit (docs/flower.md, "Equivalence").

These tests run fedhet's ServerApp and ClientApp in process (:class:`fedhet.flower.local_grid.LocalGrid`:
Flower's ServerApp/ClientApp objects, messages, records and Context.state, without SuperLink and
SuperNode processes); tests/flower/test_flower_deploy.py runs the same apps on a real SuperLink.
"""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("flwr")

from fedhet.algorithms.scaffold import CONTROL_VARIATE  # noqa: E402
from fedhet.flower import build  # noqa: E402
from fedhet.flower.client_app import app as client_app  # noqa: E402
from fedhet.flower.local_grid import LocalGrid, run_local  # noqa: E402
from fedhet.flower.server_app import app as server_app, run_server  # noqa: E402
from fedhet.flower.settings import AppSettings  # noqa: E402
from flower_cases import METHODS, fedhet_run_params, small_config, two_nodes  # noqa: E402


def deploy_in_process(config, node_configs=None, **settings):
    app_settings = AppSettings(config_text=build.config_text(config), min_nodes=1, **settings)
    grid = LocalGrid(client_app, node_configs or two_nodes(), app_settings.to_run_config())
    return run_server(grid, app_settings), grid


@pytest.mark.parametrize("method", sorted(METHODS))
def test_flower_apps_give_fedhet_runs_model_bitwise_float64(method, tmp_path):
    config = small_config(METHODS[method])
    result, grid = deploy_in_process(config)
    expected = fedhet_run_params(config, tmp_path / "run")
    assert torch.equal(result.params, expected), float((result.params - expected).abs().max())
    # Each round sends one train message per node hosting sampled clients, and the model moved.
    assert {kind for _, kind in grid.sent} == {"query", "train"}
    assert not torch.equal(result.params, build.build_federation(config).task.spec.flatten(
        build.build_federation(config).task.model).to(result.params.dtype))
    assert result.failures == []


@pytest.mark.parametrize("method", ["fedaware", "scaffold"])
def test_flower_apps_bitwise_in_float32(method, tmp_path):
    config = small_config(METHODS[method], dtype="float32")
    result, _ = deploy_in_process(config)
    assert result.params.dtype == torch.float32
    assert torch.equal(result.params, fedhet_run_params(config, tmp_path / "run"))


def test_client_state_lives_in_each_nodes_context(tmp_path):
    """SCAFFOLD's c_i is kept in the hosting node's Context.state and nowhere on the server: committed
    (``fedhet.client.<i>``) once the server accepted the round that produced it, pending
    (``fedhet.pending.<i>``) until the client's next round tells the node so."""
    config = small_config(METHODS["scaffold"], rounds=3)
    result, grid = deploy_in_process(config)
    trained = result.participation.any(dim=0).nonzero().flatten().tolist()
    for node_id, context in grid.contexts.items():
        keys = {key for key in context.state.keys() if key.startswith(("fedhet.client.", "fedhet.pending."))}
        hosted = set(result.hosts[node_id])
        assert {int(key.rsplit(".", 1)[1]) for key in keys} == {c for c in trained if c in hosted}
        for key in keys:
            record = context.state.array_records[key]
            assert set(record.keys()) == {CONTROL_VARIATE}
            assert float(abs(record[CONTROL_VARIATE].numpy()).max()) > 0    # c_i moved after training


def test_one_node_or_explicit_client_ids_give_the_same_model(tmp_path):
    config = small_config(METHODS["fedaware"], rounds=3)
    one, _ = deploy_in_process(config, node_configs=[{}])
    explicit, _ = deploy_in_process(config, node_configs=[{"client-ids": "0,2,3"}, {"client-ids": "1,4,5"}])
    assert torch.equal(one.params, explicit.params)


def test_nodes_participation_is_full_participation(tmp_path):
    """participation = "nodes": every client of every connected node trains: the simulation's full participation."""
    config = small_config(["participation.name=full"], rounds=3)
    result, _ = deploy_in_process(config, participation="nodes")
    assert bool(result.participation.all())
    assert torch.equal(result.params, fedhet_run_params(config, tmp_path / "run"))


def test_server_app_main_writes_results(tmp_path):
    config = small_config(METHODS["fedau"], rounds=3)
    settings = AppSettings(config_text=build.config_text(config), result_dir=str(tmp_path / "result"))
    grid = LocalGrid(client_app, two_nodes(), settings.to_run_config())
    run_local(server_app, grid)
    params = torch.load(tmp_path / "result" / "params.pt", weights_only=True)
    assert torch.equal(params, fedhet_run_params(config, tmp_path / "run"))
    lines = (tmp_path / "result" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 3 and '"test_accuracy"' in lines[-1]


def test_client_state_is_rounded_as_the_simulations_store(tmp_path):
    """run.store_dtype = bfloat16: SCAFFOLD's c_i kept on the nodes is rounded to bfloat16 exactly as the
    simulation's per-client store rounds it, so the models stay bitwise equal."""
    config = small_config([*METHODS["scaffold"], "run.store_dtype=bfloat16"], dtype="float32")
    result, _ = deploy_in_process(config)
    expected = fedhet_run_params(config, tmp_path / "run")
    assert torch.equal(result.params, expected)
    unrounded = fedhet_run_params(small_config(METHODS["scaffold"], dtype="float32"), tmp_path / "run32")
    assert not torch.equal(expected, unrounded)      # the storage dtype matters in this setting
