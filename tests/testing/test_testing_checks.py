"""fedhet.testing: the registry-derived checks on components registered from user code, each
failure named with its likely cause; and the solvers' seeded stream (ClientContext)."""
from __future__ import annotations

import textwrap

import pytest
import torch

import fedhet.components  # noqa: F401  (registers every shipped component)
from fedhet.cli import main
from fedhet.client.base import ClientOptions, LocalSolver
from fedhet.client.context import ClientContext, begin_client
from fedhet.core.registry import CLIENT_SOLVERS, SERVERS
from fedhet.core.seeding import torch_generator
from fedhet.server.base import NoState, ServerOptions, SGDOptimizer
from fedhet.server.methods import server_method
from fedhet.testing import ComponentCheckError, check_server, check_solver


@pytest.fixture
def registered():
    """Register test components; removed again afterwards so the zoo tests do not see them."""
    names = []

    def register(registry, name, options_cls, factory, **declarations):
        registry.register(name, options_cls, replace=True, **declarations)(factory)
        names.append((registry, name))

    yield register
    for registry, name in names:
        registry._entries.pop(name, None)


class KeepsGradient(LocalSolver):
    """Local momentum that keeps the gradient tensor itself (the bug of issue 24) while declaring that it
    does not: the sequential backend then hands it its reused buffer (client.base.GradFn)."""

    keeps_gradient = False

    def begin(self, x, client_state, broadcast, learning_rate, context=None):
        return {"velocity": None}

    def direction(self, w, x, grad_fn, local):
        loss, grad = self.gradient(w, grad_fn)
        if local["velocity"] is None:
            local["velocity"] = grad                      # no clone: the sequential buffer is kept
        else:
            local["velocity"] = 0.9 * local["velocity"] + grad
        return loss, local["velocity"]


class GlobalNoise(LocalSolver):
    """Draws noise from torch's global generator, not from its context."""

    def direction(self, w, x, grad_fn, local):
        loss, grad = self.gradient(w, grad_fn)
        return loss, grad + 0.01 * torch.randn(w.shape, dtype=w.dtype)


class CountsRounds(LocalSolver):
    """Keeps state on the solver object (lost by a checkpoint): a step size growing with each round."""

    def __init__(self, options):
        super().__init__(options)
        self.rounds_seen = 0

    def begin(self, x, client_state, broadcast, learning_rate, context=None):
        self.rounds_seen += 1
        return {}

    def direction(self, w, x, grad_fn, local):
        loss, grad = self.gradient(w, grad_fn)
        return loss, grad * (1 + 0.1 * self.rounds_seen)


class ContextNoise(LocalSolver):
    """Noise from the context's per-client streams (what docs/extending.md recommends)."""

    def begin(self, x, client_state, broadcast, learning_rate, context=None):
        return {"context": context}

    def direction(self, w, x, grad_fn, local):
        loss, grad = self.gradient(w, grad_fn)
        return loss, grad + 0.01 * local["context"].randn(w.shape[-1], dtype=w.dtype)


class MeanOverParticipants:
    """Divides by the number of participants without checking it (fails on an empty round)."""

    def init(self, params, context):
        return NoState()

    def aggregate(self, state, cohort, context):
        return -cohort.deltas.sum(0) / len(cohort), state, {}


def test_a_shipped_solver_and_server_pass_every_check():
    result = check_solver("sgd")
    assert len(result.passed) == 3 and not result.skipped
    assert any("kill and resume" in line for line in check_server("fedavg").lines())


def test_a_kept_gradient_buffer_is_named_as_the_cause(registered):
    registered(CLIENT_SOLVERS, "keeps_gradient", ClientOptions, KeepsGradient)
    with pytest.raises(ComponentCheckError, match="backend parity failed") as caught:
        check_solver("keeps_gradient")
    assert "grad.clone()" in str(caught.value) and "keeps_gradient = False" in str(caught.value)
    # Without the wrong declaration (a user's solver may keep its gradient by default) it passes.
    registered(CLIENT_SOLVERS, "keeps_gradient_undeclared", ClientOptions,
               type("KeepsUndeclared", (LocalSolver,), {"begin": KeepsGradient.begin,
                                                        "direction": KeepsGradient.direction}))
    check_solver("keeps_gradient_undeclared")


def test_draws_from_the_global_generator_fail_parity_and_name_the_context(registered):
    registered(CLIENT_SOLVERS, "global_noise", ClientOptions, GlobalNoise)
    with pytest.raises(ComponentCheckError, match="global generator") as caught:
        check_solver("global_noise")
    assert "context" in str(caught.value)


def test_state_kept_on_the_solver_object_fails_the_resume_check(registered):
    registered(CLIENT_SOLVERS, "counts_rounds", ClientOptions, CountsRounds)
    with pytest.raises(ComponentCheckError, match="kill and resume failed") as caught:
        check_solver("counts_rounds")
    assert "client_state_names" in str(caught.value)


def test_a_server_that_fails_on_an_empty_round_is_named(registered):
    registered(SERVERS, "mean_over_participants", ServerOptions,
               lambda options: server_method(MeanOverParticipants(), SGDOptimizer(options.learning_rate), options),
               gradient_step=True)
    with pytest.raises(ComponentCheckError, match="empty rounds failed") as caught:
        check_server("mean_over_participants")
    assert "len(cohort) == 0" in str(caught.value)


def test_solver_noise_from_the_context_is_the_same_on_every_backend_and_after_resume(registered):
    registered(CLIENT_SOLVERS, "context_noise", ClientOptions, ContextNoise)
    assert check_solver("context_noise").passed == (
        "kill and resume (round 2 of 4, bit for bit)", "backend parity (sequential = vectorized)", "empty rounds")


def test_context_rows_are_each_clients_own_stream_keyed_like_every_other():
    one = ClientContext(round_index=3, client_ids=(5,), seed=7, cohort=False)
    cohort = ClientContext(round_index=3, client_ids=(2, 5), seed=7, cohort=True)
    expected = torch.randn(6, generator=torch_generator(7, "solver", 3, 5), dtype=torch.float64)
    assert torch.equal(one.randn(6, dtype=torch.float64), expected)
    rows = cohort.randn(6, dtype=torch.float64)
    assert rows.shape == (2, 6) and torch.equal(rows[1], expected)
    assert not torch.equal(rows[0], rows[1])
    assert one.client_id == 5 and one.generator is one.generators[0]
    with pytest.raises(ValueError, match="2 clients"):
        cohort.client_id


def test_a_solver_written_before_the_context_is_still_called():
    class OldSolver(LocalSolver):
        def begin(self, x, client_state, broadcast, learning_rate):
            return {"old": True}

    context = ClientContext(0, (0,), 1, cohort=False)
    assert begin_client(OldSolver(ClientOptions()), None, {}, {}, 0.1, context) == {"old": True}
    assert begin_client(ContextNoise(ClientOptions()), None, {}, {}, 0.1, context) == {"context": context}


def test_check_command_imports_a_user_module_and_reports_a_failure(tmp_path, capsys):
    module = tmp_path / "user_solvers.py"
    module.write_text(textwrap.dedent('''
        from fedhet.client.base import ClientOptions, LocalSolver
        from fedhet.core.registry import CLIENT_SOLVERS

        class Keeps(LocalSolver):
            keeps_gradient = False                         # wrongly: it keeps the first step's buffer

            def direction(self, w, x, grad_fn, local):
                loss, grad = self.gradient(w, grad_fn)
                kept = local.setdefault("kept", grad)      # the first step's buffer, kept
                return loss, grad + 0.5 * kept

        @CLIENT_SOLVERS.register("user_keeps", ClientOptions, replace=True)
        def make(options):
            """A solver that keeps the gradient buffer."""
            return Keeps(options)
    '''))
    try:
        assert main(["check", "solver", "user_keeps", "--module", str(module)]) == 1
        assert "backend parity failed" in capsys.readouterr().err
        assert main(["check", "solver", "sgd"]) == 0
        assert "ok   kill and resume" in capsys.readouterr().out
        assert main(["check", "server"]) == 2
        assert "give the registered name to check: fedhet check server NAME" in capsys.readouterr().err
        assert main(["check", "solver", "nope_solver"]) == 2
        assert "client.name" in capsys.readouterr().err
        assert main(["check", "solver", "sgd", "--module", "no_such_module_here"]) == 2
        assert "no module of that name" in capsys.readouterr().err
    finally:
        CLIENT_SOLVERS._entries.pop("user_keeps", None)
