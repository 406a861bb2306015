"""fedhet.algorithms.build: one place makes a solver and its server method, sharing options and
handing the solver's server stage to the server method (docs/design.md, "Algorithms")."""
import dataclasses

import pytest
import torch

import fedhet.components  # noqa: F401  (registers the components)
from fedhet.algorithms import Algorithm, build, build_parts, server_for
from fedhet.algorithms.fedavgm import FedAvgMOptions
from fedhet.algorithms.feddyn import FedDynOptions
from fedhet.algorithms.fedspeed import FedSpeedOptions
from fedhet.algorithms.scaffold import ControlVariate
from fedhet.client.base import ClientOptions
from fedhet.config.schema import resolve_config
from fedhet.core.options import ConfigError
from fedhet.core.registry import ALGORITHMS, CLIENT_SOLVERS
from fedhet.server.base import ServerContext, ServerOptions


def test_every_named_algorithm_builds_its_registered_pair():
    for name, pair in ALGORITHMS.items():
        config = resolve_config({"algorithm": name})
        solver, server = build(config)
        expected = CLIENT_SOLVERS.get(pair.client).factory(config.client.options)
        assert type(solver) is type(expected), name
        stage = solver.server_stage()
        assert (server.stage is None) == (stage is None), name
        if stage is not None:
            assert type(server.stage) is type(stage), name


def test_build_returns_a_named_pair():
    built = build(resolve_config({"algorithm": "scaffold"}))
    assert isinstance(built, Algorithm) and built.solver is built[0] and built.server is built[1]


def test_a_server_that_shares_the_solvers_options_reads_them_from_the_client_section():
    _, server = build_parts("feddyn", FedDynOptions(alpha=0.3), "feddyn", ServerOptions())
    assert server.aggregator.alpha == 0.3
    _, speed = build_parts("fedspeed", FedSpeedOptions(prox_weight=0.25), "fedspeed", ServerOptions())
    assert speed.aggregator.alpha == 0.25          # released-code: FedDyn's rule with alpha = 1/lambda
    _, paper = build_parts("fedspeed", FedSpeedOptions(variant="paper"), "fedspeed", ServerOptions())
    assert not hasattr(paper.aggregator, "alpha")  # the paper's rule: the plain mean


def test_a_server_built_for_another_solver_is_a_config_error_naming_the_one_it_needs():
    with pytest.raises(ConfigError, match=r"server.name = 'feddyn'.*client.name = 'feddyn', or algorithm = 'feddyn'"):
        build_parts("sgd", ClientOptions(), "feddyn", ServerOptions())
    with pytest.raises(ConfigError, match="client.name = 'fedspeed'"):
        build(resolve_config({"client": {"name": "fedprox"}, "server": {"name": "fedspeed"}}))


def test_a_solvers_server_stage_goes_with_any_server_method_and_is_broadcast():
    solver = CLIENT_SOLVERS.get("scaffold").factory(ClientOptions())
    server = server_for(solver, "fedavgm", FedAvgMOptions())
    assert isinstance(server.stage, ControlVariate)
    context = ServerContext(round_index=0, num_clients=3, make_store=None)
    state = server.init(torch.ones(4), context)
    assert list(server.broadcast(state)) == ["control_variate"]
    assert torch.equal(server.broadcast(state)["control_variate"], torch.zeros(4))
    # A solver without a stage leaves the server method as it was built, with nothing to broadcast.
    plain = server_for(CLIENT_SOLVERS.get("sgd").factory(ClientOptions()), "fedavgm", FedAvgMOptions())
    assert plain.stage is None and plain.broadcast(plain.init(torch.ones(4), context)) == {}


def test_the_server_context_carries_no_solver():
    assert "solver" not in {field.name for field in dataclasses.fields(ServerContext)}


def test_the_runner_builds_both_halves_with_build(monkeypatch, tmp_path):
    import fedhet.engine.run_handle as run_handle
    import fedhet.engine.runner as runner
    calls = []

    def spy(config):
        calls.append(config.algorithm)
        return build(config)
    monkeypatch.setattr(run_handle, "build_algorithm", spy)     # where the runner's RunHandle builds them
    config = resolve_config({"algorithm": "scaffold", "data": {"name": "synthetic", "num_devices": 4,
                                                                "max_device_size": 20},
                             "partition": {"name": "natural"}, "model": {"name": "logreg"},
                             "participation": {"name": "full"},
                             "run": {"rounds": 1, "progress": False, "backend": "sequential"}})
    runner.run_experiment(config, tmp_path / "run")
    assert calls == ["scaffold"]


def test_a_simulator_refuses_a_solver_whose_server_stage_the_server_lacks():
    """SCAFFOLD's clients read ``c`` from the server; a server method built without the solver's stage
    (the registries one by one instead of build) is refused when the simulator is made, not with a
    missing broadcast key at the first client."""
    from fedhet.core.registry import SERVERS
    from fedhet.problems.least_squares import make_least_squares

    problem = make_least_squares(num_clients=3, dim=4, examples_per_client=6, seed=0)
    solver = CLIENT_SOLVERS.get("scaffold").factory(CLIENT_SOLVERS.get("scaffold").options_cls())
    with pytest.raises(ValueError, match="ScaffoldSolver's clients read server-side state .*fedhet.algorithms.build"):
        problem.simulator(solver=solver, server=SERVERS.get("fedavg").factory(ServerOptions()))
    paired = server_for(solver, "fedavg", ServerOptions())
    assert problem.simulator(solver=solver, server=paired).run(1).shape == (problem.task.spec.dim,)
