"""FedDyn (Acar, Zhao, Matas, Mattina, Whatmough, Saligrama, ICLR 2021)

Federated learning with dynamic regularisation, Algorithm 1. Client i keeps ``gradL_i`` (the
gradient of its local loss at its last local model; zero at first) and approximately minimises, by
K_i local SGD steps from ``x``::

    f_i(w) - <gradL_i, w> + (alpha/2) ||w - x||^2
    direction = grad f_i(w) - gradL_i + alpha (w - x)
    after training: gradL_i <- gradL_i - alpha (w_K - x);   upload delta_i = w_K - x

Server (state ``h``, zero at first; ``w_i = x + delta_i``; :class:`FedDynAggregator`, built with the
solver's ``alpha``: one option, ``client.alpha``, read by both halves)::

    h <- h - alpha (1/N) sum_{i in S} (w_i - x)
    x <- (1/|S|) sum_{i in S} w_i - h / alpha

The regulariser's gradient ``-gradL_i + alpha (w - x)`` is added analytically to the minibatch
gradient. (The released FedAWARE/FedLab FedDyn builds these terms from detached tensors, which gives
them zero gradient and silently turns the method into plain SGD; docs/algorithms.md section 3.)

Rule table local:
    | FedDyn (Acar 2021) | minimise `f_i(w) - <gradL_i, w> + (alpha/2)||w - x||^2` |
        `gradL_i <- gradL_i - alpha (w_K - x)`; server `h <- h - alpha (1/N) sum_S (w_i - x)`, `x <- mean_S w_i - h/alpha` |
"""
from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import torch

from fedhet.client.base import ClientOptions, GradFn, LocalSolver
from fedhet.client.proximal import prox_effective_steps
from fedhet.core.options import option
from fedhet.core.registry import CLIENT_SOLVERS, SERVERS, NotAGradientStep, register_algorithm
from fedhet.server.base import ComposedServer, ServerContext, ServerOptions, SGDOptimizer
from fedhet.server.methods import server_method

LOCAL_GRADIENT = "local_gradient"
NOT_A_GRADIENT_STEP = NotAGradientStep("FedDyn's server sets x <- mean_S w_i - h/alpha, which is not a gradient step")


@dataclasses.dataclass(frozen=True)
class FedDynOptions(ClientOptions):
    """``[client]`` options of ``feddyn``."""

    alpha: float = option(0.01, gt=0, symbol="alpha",
                          help="dynamic-regulariser weight: local objective f_i(w) - <gradL_i, w> + (alpha/2)||w - x||^2")


class FedDynState(NamedTuple):
    """:class:`FedDynAggregator`'s state: the server's ``h``."""

    h: torch.Tensor


class FedDynSolver(LocalSolver):
    """FedDyn's client: ``direction = grad f_i(w) - gradL_i + alpha (w - x)``; see the module docstring."""

    keeps_gradient = False      # the gradient is read once, in the step (client.base.GradFn)
    lockstep_knobs = ("alpha",)     # read only arithmetically: a per-row column in lockstep runs
    client_state_names = (LOCAL_GRADIENT,)

    def __init__(self, options: FedDynOptions):
        super().__init__(options)
        self.alpha = options.alpha

    def begin(self, x, client_state, broadcast, learning_rate, context=None) -> dict[str, Any]:
        return {"local_gradient": client_state[LOCAL_GRADIENT]}

    def direction(self, w: torch.Tensor, x: torch.Tensor, grad_fn: GradFn,
                  local: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        loss, grad = self.gradient(w, grad_fn)
        return loss, grad - local["local_gradient"] + self.alpha * (w - x)

    def segment_direction(self, grad: torch.Tensor, w: torch.Tensor, x: torch.Tensor, local: dict[str, Any],
                          part: slice) -> torch.Tensor:
        return (super().segment_direction(grad, w, x, local, part) - local["local_gradient"][part]
                + self.alpha * (w - x[part]))

    def finish(self, x, w, local, client_state, num_steps, learning_rate):
        delta = w - x
        return delta, {LOCAL_GRADIENT: client_state[LOCAL_GRADIENT] - self.alpha * delta}, {}

    def effective_steps(self, num_steps: torch.Tensor, learning_rate: float) -> torch.Tensor:
        # The local recursion contracts towards x by (1 - eta_l alpha) per step, as FedProx's does.
        return prox_effective_steps(num_steps, learning_rate, self.alpha)


class FedDynAggregator:
    """FedDyn's server rule as a pseudo-gradient (state ``h``, zero at first)::

        h <- h - alpha (1/N) sum_S delta_i
        G  = -(1/|S|) sum_S delta_i + h / alpha

    so that ``x - G = mean_S w_i - h/alpha`` (Acar et al. 2021, Algorithm 1) when the server
    optimiser is SGD with ``eta_g = 1``. A round nobody trained leaves ``x`` and ``h`` unchanged.
    ``alpha`` is FedDyn's ``client.alpha``; FedSpeed's released-code variant uses the same rule with
    ``alpha = 1/lambda``.
    """

    def __init__(self, alpha: float):
        self.alpha = alpha

    def init(self, params: torch.Tensor, context: ServerContext) -> FedDynState:
        return FedDynState(h=torch.zeros_like(params))

    def aggregate(self, state, cohort, context):
        if len(cohort) == 0:
            return None, state, {}
        alpha = self.alpha
        h = state.h - alpha * cohort.deltas.sum(dim=0) / context.num_clients
        return -cohort.deltas.mean(dim=0) + h / alpha, FedDynState(h), {"feddyn_h_norm": float(torch.linalg.vector_norm(h))}


@CLIENT_SOLVERS.register("feddyn", FedDynOptions)
def make_feddyn(options: FedDynOptions) -> LocalSolver:
    """FedDyn: grad - gradL_i + alpha (w - x); gradL_i <- gradL_i - alpha (w_K - x) (Acar et al. 2021)."""
    return FedDynSolver(options)


@SERVERS.register("feddyn", ServerOptions, client="feddyn", client_options_cls=FedDynOptions,
                  gradient_step=NOT_A_GRADIENT_STEP)
def make_feddyn_server(options: ServerOptions, client: FedDynOptions) -> ComposedServer:
    """FedDyn's server: h <- h - alpha mean_N(delta), x <- mean_S w_i - h/alpha (eta_g = 1 is the paper's)."""
    return server_method(FedDynAggregator(client.alpha), SGDOptimizer(options.learning_rate), options)


register_algorithm("feddyn", client="feddyn", server="feddyn")
