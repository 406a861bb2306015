import pytest
import torch

import fedhet.components  # noqa: F401
from fedhet.algorithms import server_for
from fedhet.algorithms.feddyn import FedDynOptions
from fedhet.algorithms.fedprox import FedProxOptions
from fedhet.algorithms.fedspeed import PROX_CORRECTION, FedSpeedOptions
from fedhet.client.base import ClientOptions
from fedhet.core.options import ConfigError
from fedhet.core.registry import CLIENT_SOLVERS
from fedhet.participation.uniform import UniformOptions, make_uniform
from fedhet.problems.least_squares import full_batch_options, make_least_squares
from fedhet.server.base import ServerOptions


def test_rounds_match_a_transcription_of_fedspeed_algorithm_one():
    """Sun et al. 2023, Algorithm 1 line by line, partial participation (2 of 4), lambda = 2."""
    num_clients, lr, steps = 4, 0.05, 4
    rho0, alpha, lam = 0.1, 0.9375, 2.0
    problem = make_least_squares(num_clients=num_clients, dim=3, examples_per_client=10, seed=5)
    options = full_batch_options(problem, FedSpeedOptions, learning_rate=lr, steps=steps, rho0=rho0, alpha=alpha,
                                 prox_weight=1 / lam, variant="paper")
    sim = problem.simulator(solver=(solver := CLIENT_SOLVERS.get("fedspeed").factory(options)),
                            server=server_for(solver, "fedspeed", ServerOptions()),
                            participation=make_uniform(UniformOptions(clients_per_round=2)), seed=7)
    x = problem.initial_params.clone()
    ghat = torch.zeros(num_clients, 3, dtype=torch.float64)
    for _ in range(3):
        _, cohort = sim.run_round()
        uploads = []
        for client in cohort.client_ids.tolist():
            w = x.clone()
            for _ in range(steps):
                g1 = problem.client_gradient(client, w)                               # line 7
                w_check = w + (rho0 / torch.linalg.vector_norm(g1)) * g1              # line 8
                g2 = problem.client_gradient(client, w_check)                         # line 9
                g_tilde = (1 - alpha) * g1 + alpha * g2                                # line 10
                w = w - lr * (g_tilde - ghat[client] + (1 / lam) * (w - x))           # line 11
            ghat[client] = ghat[client] - (1 / lam) * (w - x)                         # line 13
            uploads.append(w - lam * ghat[client])                                    # line 14
        x = torch.stack(uploads).mean(dim=0)                                          # line 16
    assert torch.allclose(sim.params, x, rtol=0, atol=1e-12)
    assert torch.allclose(sim.client_stores[PROX_CORRECTION].read_all(), ghat, rtol=0, atol=1e-12)


def test_fedspeed_without_perturbation_merge_or_prox_equals_local_sgd_exactly():
    """rho0 = 0, alpha = 0, 1/lambda = 0: local SGD (same server on both sides)."""
    problem = make_least_squares(num_clients=4, dim=3, examples_per_client=12, seed=1)
    shared = dict(learning_rate=0.05, batch_size=5, epochs=2, weight_decay=1e-3)
    finals = []
    for name, options in [("sgd", ClientOptions(**shared)),
                          ("fedspeed", FedSpeedOptions(rho0=0.0, alpha=0.0, prox_weight=0.0, **shared))]:
        sim = problem.simulator(solver=(solver := CLIENT_SOLVERS.get(name).factory(options)),
                                server=server_for(solver, "fedavg", ServerOptions()),
                                participation=make_uniform(UniformOptions(clients_per_round=2)), seed=3)
        finals.append(sim.run(5))
    assert torch.equal(finals[0], finals[1])


@pytest.mark.parametrize("variant", ["paper", "released-code"])
def test_without_prox_correction_and_perturbation_fedspeed_is_fedprox_with_an_unweighted_mean(variant):
    """Table 7's "prox-term" row: FedProx's local steps (mu = 1/lambda), no per-client store, and
    the server's unweighted mean of w_K - x, checked against FedProx's solver and that mean."""
    problem = make_least_squares(num_clients=4, dim=3, examples_per_client=[6, 9, 12, 15], seed=4)
    shared = dict(learning_rate=0.05, batch_size=5, epochs=2)
    speed = CLIENT_SOLVERS.get("fedspeed").factory(FedSpeedOptions(
        rho0=0.0, alpha=0.0, prox_weight=0.3, prox_correction=False, variant=variant, **shared))
    prox = CLIENT_SOLVERS.get("fedprox").factory(FedProxOptions(mu=0.3, **shared))
    sims = [problem.simulator(solver=solver, server=server_for(solver, server, ServerOptions()),
                              participation=make_uniform(UniformOptions(clients_per_round=2)), seed=5)
            for solver, server in ((speed, "fedspeed"), (prox, "average_participating"))]
    assert sims[0].client_stores == {}
    for _ in range(4):
        x = sims[0].params.clone()
        _, cohort = sims[0].run_round()
        _, reference = sims[1].run_round()
        assert torch.equal(cohort.deltas, reference.deltas)
        assert torch.allclose(sims[0].params, x + cohort.deltas.mean(dim=0), rtol=0, atol=1e-14)
    assert torch.equal(sims[0].params, sims[1].params)


def test_prox_correction_switch_changes_only_the_correction():
    """With the perturbation on, turning the correction off differs from the full algorithm from
    round 2 on (round 1 has ghat_i = 0 everywhere, so its local steps coincide)."""
    problem = make_least_squares(num_clients=2, dim=3, examples_per_client=10, seed=6)
    options = dict(rho0=0.05, alpha=0.5, prox_weight=0.5, learning_rate=0.05, batch_size=5, epochs=1,
                   variant="paper")
    sims = [problem.simulator(solver=(solver := CLIENT_SOLVERS.get("fedspeed").factory(FedSpeedOptions(prox_correction=flag, **options))),
                              server=server_for(solver, "fedspeed", ServerOptions()))
            for flag in (True, False)]
    (_, with_correction), (_, without) = (sim.run_round() for sim in sims)
    # Round 1: same local steps; the paper's upload subtracts lambda ghat_i, the ablation's does not.
    ghat = sims[0].client_stores[PROX_CORRECTION].read_all()
    assert torch.allclose(with_correction.deltas, without.deltas - ghat / 0.5, rtol=0, atol=1e-14)
    assert not torch.equal(sims[0].run(1), sims[1].run(1))


def test_fedspeed_server_is_the_unweighted_mean_of_the_uploads():
    """With unequal client sizes the FedSpeed server ignores data sizes; uploads are xhat_i - x."""
    problem = make_least_squares(num_clients=3, dim=3, examples_per_client=[4, 8, 20], seed=2)
    options = full_batch_options(problem, FedSpeedOptions, learning_rate=0.05, steps=2, variant="paper")
    sim = problem.simulator(solver=(solver := CLIENT_SOLVERS.get("fedspeed").factory(options)),
                            server=server_for(solver, "fedspeed", ServerOptions()))
    x = sim.params.clone()
    _, cohort = sim.run_round()
    assert torch.allclose(sim.params, x + cohort.deltas.mean(dim=0), rtol=0, atol=1e-14)


def test_paper_defaults():
    options = FedSpeedOptions()
    assert (options.rho0, options.alpha, options.prox_weight) == (0.1, 0.9375, 0.1)


def test_default_variant_is_the_released_code_server_rule():
    """The default reproduces the paper's partial-participation results (docs/algorithms.md):
    with no variant given, a run equals an explicit released-code run and differs from the paper's."""
    assert FedSpeedOptions().variant == "released-code"
    problem = make_least_squares(num_clients=6, dim=3, examples_per_client=10, seed=3)
    finals = {}
    for variant in (None, "released-code", "paper"):
        extra = {} if variant is None else {"variant": variant}
        options = full_batch_options(problem, FedSpeedOptions, learning_rate=0.05, steps=2, prox_weight=0.5, **extra)
        finals[variant] = _run(problem, "fedspeed", options, make_uniform(UniformOptions(clients_per_round=2)), 4)
    assert torch.equal(finals[None], finals["released-code"])
    assert not torch.allclose(finals[None], finals["paper"], atol=1e-6)


def _run(problem, name, options, participation, rounds, server=None):
    sim = problem.simulator(solver=(solver := CLIENT_SOLVERS.get(name).factory(options)),
                            server=server_for(solver, server or name, ServerOptions()),
                            participation=participation, seed=7)
    return sim.run(rounds)


def test_released_code_variant_equals_the_paper_with_full_participation():
    problem = make_least_squares(num_clients=3, dim=3, examples_per_client=10, seed=5)
    finals = [_run(problem, "fedspeed", full_batch_options(problem, FedSpeedOptions, learning_rate=0.05, steps=3,
                                                           prox_weight=0.5, variant=variant), None, 3)
              for variant in ("paper", "released-code")]
    assert torch.allclose(finals[0], finals[1], rtol=0, atol=1e-12)


def test_released_code_variant_is_feddyn_with_alpha_one_over_lambda_under_partial_participation():
    """Without perturbation (rho0 = 0, alpha = 0) the released-code variant is FedDyn bit for bit;
    the paper's variant is not (its server averages the participants' stale corrections only)."""
    problem = make_least_squares(num_clients=4, dim=3, examples_per_client=10, seed=5)

    def uniform():
        return make_uniform(UniformOptions(clients_per_round=2))

    feddyn = _run(problem, "feddyn", full_batch_options(problem, FedDynOptions, learning_rate=0.05, steps=3,
                                                        alpha=0.5), uniform(), 4)
    speeds = {variant: _run(problem, "fedspeed", full_batch_options(
        problem, FedSpeedOptions, learning_rate=0.05, steps=3, rho0=0.0, alpha=0.0, prox_weight=0.5,
        variant=variant), uniform(), 4) for variant in ("released-code", "paper")}
    assert torch.equal(speeds["released-code"], feddyn)
    assert not torch.allclose(speeds["paper"], feddyn, atol=1e-6)


def test_fedspeed_server_needs_the_fedspeed_client_and_refuses_aware_for_released_code():
    problem = make_least_squares(num_clients=2, dim=3, examples_per_client=10, seed=5)
    with pytest.raises(ConfigError, match="client.name = 'fedspeed'"):
        problem.simulator(solver=(solver := CLIENT_SOLVERS.get("sgd").factory(ClientOptions())),
                          server=server_for(solver, "fedspeed", ServerOptions()))
    with pytest.raises(ConfigError, match="server.aware"):
        problem.simulator(solver=(solver := CLIENT_SOLVERS.get("fedspeed").factory(FedSpeedOptions(variant="released-code"))),
                          server=server_for(solver, "fedspeed", ServerOptions(aware=True)))
