"""``fedhet tune``'s search on the least-squares problem, against closed-form truths: the largest
Hessian eigenvalue L (torch.linalg) bounds the stable steps (step < 2/L), and gradient descent's loss
at a fixed round is computed here from the analytic gradients."""
import math

import pytest
import torch
from least_squares_runner import LeastSquaresRunner

import fedhet.components  # noqa: F401  (registers the solvers and servers)
from fedhet.lab.tuning.criteria import Criterion
from fedhet.lab.tuning.search import SearchSettings, run_search
from fedhet.lab.tuning.space import parse_parameter
from fedhet.problems.least_squares import make_least_squares

ROUNDS = 30


@pytest.fixture(scope="module")
def problem():
    return make_least_squares(num_clients=4, dim=3, examples_per_client=12, scale_spread=0.5, seed=3)


def largest_hessian_eigenvalue(problem):
    """L of the global loss sum_i (n_i/n) f_i: its Hessian is A^T A / n for the stacked design."""
    design = torch.cat(problem.designs)
    return float(torch.linalg.eigvalsh(design.T @ design / design.shape[0]).max())


def gd_loss_at_round(problem, step, rounds):
    """train_loss of round ``rounds``: the global loss at the iterate the round starts from."""
    x = problem.initial_params.clone()
    sizes = torch.tensor([len(t) for t in problem.targets], dtype=torch.float64)
    for _ in range(rounds - 1):
        grads = torch.stack([problem.client_gradient(i, x) for i in range(problem.num_clients)])
        x = x - step * (sizes / sizes.sum()) @ grads
    return problem.global_loss(x)


def test_grid_search_picks_the_best_step_and_it_is_inside_the_stable_range(problem, tmp_path):
    space = (parse_parameter("client.learning_rate=log:0.01:10:19"),)
    criterion = Criterion("train_loss", ROUNDS)
    result = run_search(SearchSettings(space=space, criterion=criterion), LeastSquaresRunner(problem, ROUNDS),
                        tmp_path)
    steps = space[0].values
    limit = 2.0 / largest_hessian_eigenvalue(problem)
    assert min(steps) < limit < max(steps)          # the grid reaches past the stable range
    truth = {step: gd_loss_at_round(problem, step, ROUNDS) for step in steps}
    chosen = result.best.values["client.learning_rate"]
    finite = {s: v for s, v in truth.items() if math.isfinite(v)}
    assert chosen == min(finite, key=finite.get)
    assert 0 < chosen < limit
    assert result.best.value == pytest.approx(truth[chosen], rel=1e-9)


def test_optuna_search_stays_inside_the_stable_range(problem, tmp_path):
    pytest.importorskip("optuna")
    settings = SearchSettings(space=(parse_parameter("client.learning_rate=log:0.01:10:2"),),
                              criterion=Criterion("train_loss", ROUNDS), sampler="optuna", trials=16, seed=1,
                              startup_trials=4)
    result = run_search(settings, LeastSquaresRunner(problem, ROUNDS), tmp_path)
    chosen = result.best.values["client.learning_rate"]
    assert 0 < chosen < 2.0 / largest_hessian_eigenvalue(problem)
    completed = [t for t in result.trials if t.state == "complete"]
    assert result.best.value == min(t.value for t in completed)
    assert result.best.value == pytest.approx(gd_loss_at_round(problem, chosen, ROUNDS), rel=1e-9)
    assert any(t.state == "pruned" for t in result.trials)   # the median rule stopped some trials early


def _table(result):
    return [(t.number, t.state, t.values, t.value) for t in result.trials]


def test_optuna_search_interrupted_mid_trial_and_resumed_equals_an_uninterrupted_one(problem, tmp_path):
    pytest.importorskip("optuna")
    settings = SearchSettings(space=(parse_parameter("client.learning_rate=log:0.01:10:2"),),
                              criterion=Criterion("train_loss", ROUNDS), sampler="optuna", trials=10, seed=7,
                              startup_trials=3)
    whole = run_search(settings, LeastSquaresRunner(problem, ROUNDS), tmp_path / "whole")
    with pytest.raises(KeyboardInterrupt):
        run_search(settings, LeastSquaresRunner(problem, ROUNDS, interrupt_at_call=6), tmp_path / "parts")
    assert not (tmp_path / "parts" / "best.json").exists()
    resumed_runner = LeastSquaresRunner(problem, ROUNDS)
    resumed = run_search(settings, resumed_runner, tmp_path / "parts")
    assert resumed_runner.calls == 5                 # the interrupted trial and the 4 not started
    assert _table(resumed) == _table(whole)
    assert resumed.best.number == whole.best.number
    assert (tmp_path / "parts" / "best.toml").read_text() == (tmp_path / "whole" / "best.toml").read_text()
