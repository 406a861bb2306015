"""FedSpeed (Sun, Shen, Huang, Ding, Tao, ICLR 2023)

Larger local interval, fewer communication rounds: Algorithm 1, as written in the paper. Line
numbers are the algorithm's, as the paper's text cites them (local update "Line.11",
prox-correction update "Line.13").

Client i keeps the prox-correction ``ghat_i`` (zero at first). Each local step k, with one
minibatch ``b`` and ``lambda = 1 / prox_weight``::

    g1     = grad f_i(w; b)                                           (Alg. 1 line 7)
    wcheck = w + rho g1,             rho = rho0 / ||g1||             (gradient ascent, line 8)
    g2     = grad f_i(wcheck; b)                                      (same minibatch, line 9)
    gtilde = (1 - alpha) g1 + alpha g2                                (quasi-gradient, line 10)
    w     <- w - eta_l (gtilde - ghat_i + (1/lambda)(w - x))          (line 11)

after the K_i local steps::

    ghat_i <- ghat_i - (1/lambda)(w_K - x)                            (line 13)
    xhat_i  = w_K - lambda ghat_i                                     (line 14, uploaded)

and the server averages: ``x <- (1/|S|) sum_{i in S} xhat_i`` (line 16; server method ``fedspeed``,
``x <- x + eta_g mean_S (xhat_i - x)`` with the paper's ``eta_g = 1``). The cohort's delta is the
effective delta ``xhat_i - x``.

Conventions, checked against the paper:

- The prox term of line 11 is the gradient ``(1/lambda)(w - x)`` of ``(1/(2 lambda))||w - x||^2``
  and ``ghat_i`` enters with a minus sign; with equation (3) of the paper, ``ghat_i`` is an
  exponential average of past quasi-gradients, so ``-ghat_i`` cancels the pull of the prox term.
- ``rho = rho0 / ||g1||`` makes the ascent step have length ``rho0`` (docs/algorithms.md section 6; the paper's
  Algorithm 1 writes ``rho g1`` and calls ``rho`` the ascent learning rate). The norm is guarded by
  1e-12, so a zero gradient gives no perturbation instead of NaN.
- Clipping and weight decay act on ``gtilde`` as they act on the plain gradient of local SGD.
- ``prox_correction = false`` is the module ablation of the paper's Table 7 (Appendix B.3.5,
  "prox-term" and "prox-term + gradient perturbation" rows): ``ghat_i`` is never applied nor kept
  (no per-client store), so line 11 is a FedProx step on the quasi-gradient,
  ``w <- w - eta_l (gtilde + (1/lambda)(w - x))``, the upload is ``w_K - x`` and the server (both
  variants) averages the participants. With also ``rho0 = 0`` and ``alpha = 0`` it is FedProx with
  ``mu = 1/lambda`` and an unweighted server mean.
- ``prox_weight = 0`` (``lambda`` infinite) removes the prox term and the prox-correction:
  ``ghat_i`` stays 0 and ``lambda ghat_i`` is taken as 0, so ``xhat_i = w_K``. With also
  ``rho0 = 0`` and ``alpha = 0`` FedSpeed is exactly local SGD with an unweighted server mean.

Paper defaults (the paper's Section 5 and Appendix B.3): ``prox_weight`` 0.1
(lambda = 10), ``rho0`` 0.1 (= eta_l), ``alpha`` 0.9375; with eta_l 0.1, learning-rate decay
0.9995, batch 50, 5 local epochs and weight decay 1e-3, which are ``[client]`` options shared by
every solver (set them in the experiment file).

Variants (``client.variant``):

- ``"released-code"`` (default): the server rule of the authors' released code as docs/algorithms.md
  section 6 describes it: the dual is kept as the running sum of each client's deltas and averaged
  over all ``N`` clients, i.e. FedDyn's server rule with ``alpha = 1/lambda``. Clients upload ``w_K - x`` and
  the server keeps ``h = (1/N) sum_{all i} ghat_i`` (stale rows for absent clients)::

      h <- h - (1/lambda)(1/N) sum_{i in S} (w_K,i - x),      x <- mean_S w_K,i - lambda h

  With full participation this is the paper's rule (``mean_S xhat_i = mean_S w_K,i - lambda
  mean_S ghat_i``). With partial participation it differs: the paper's ``mean_S ghat_i`` is a mean
  of a few stale per-client corrections, which do not average out (at the optimum ``ghat_i ~ grad
  f_i(x*)`` is non-zero for each client and only the mean over all clients vanishes), so every round
  moves ``x`` by ``lambda`` times that noise. The released code's mean over all ``N`` does vanish.
  The local step is the same in both variants. The released code also uses only ``g2``: set
  ``alpha = 1`` to match it.
- ``"paper"``: Algorithm 1 as above (upload ``xhat_i``, the server averages the participants' ``xhat_i``).

``released-code`` is the default because it is the variant that reproduces the paper's reported
behaviour under partial participation (stable, leading results at 10% and 2% participation);
``paper`` is unstable there (docs/algorithms.md section 6).

Server half (``server.name = "fedspeed"``), built from the solver's options: ``client.variant``,
``client.prox_weight`` (``1/lambda``) and ``client.prox_correction`` choose the rule, one option each,
read by both halves.

- ``paper``: ``G = (1/|S|) sum_S g_i`` with ``g_i = x - xhat_i`` (Algorithm 1 line 16 for eta_g = 1);
- ``released-code``: FedDyn's rule with ``alpha = 1/lambda`` on the uploaded ``w_K - x``
  (:class:`~fedhet.algorithms.feddyn.FedDynAggregator`; state ``h = (1/N) sum_all ghat_i``).
  Without a prox term (``prox_weight = 0``) or with ``prox_correction = false`` there is no
  correction and it is the plain mean.

Rule table local:
    | FedSpeed (Sun 2023, Algorithm 1) | `g1 = grad f(w; batch)`, `wcheck = w + rho g1` with `rho = rho0/||g1||`,
        `g2 = grad f(wcheck; same batch)`, `gtilde = (1-alpha) g1 + alpha g2`,
        `w <- w - eta_l (gtilde - ghat_i + (1/lambda)(w - x))` | `ghat_i <- ghat_i - (1/lambda)(w_K - x)`;
        upload `xhat_i = w_K - lambda ghat_i`; server `x <- mean_S xhat_i` |
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch

from fedhet.algorithms.feddyn import FedDynAggregator
from fedhet.client.base import ClientOptions, GradFn, LocalSolver
from fedhet.client.proximal import prox_effective_steps
from fedhet.client.sharpness import ascent_point
from fedhet.core.options import option
from fedhet.core.registry import CLIENT_SOLVERS, SERVERS, NotAGradientStep, register_algorithm
from fedhet.server.averaging import AverageParticipatingAggregator
from fedhet.server.base import ComposedServer, ServerOptions, SGDOptimizer
from fedhet.server.methods import server_method

PROX_CORRECTION = "prox_correction"
VARIANTS = ("paper", "released-code")
NOT_A_GRADIENT_STEP = NotAGradientStep("FedSpeed's released-code variant uses FedDyn's server rule "
                                       "x <- mean_S w_i - lambda h, which is not a gradient step")


@dataclasses.dataclass(frozen=True)
class FedSpeedOptions(ClientOptions):
    """``[client]`` options of ``fedspeed`` (defaults: the paper's CIFAR-10 setting)."""

    rho0: float = option(0.1, ge=0, symbol="rho0",
                         help="length of the gradient-ascent step: wcheck = w + rho0 g1/||g1|| (0 = no perturbation)")
    alpha: float = option(0.9375, ge=0, le=1, symbol="alpha",
                          help="weight of the perturbed gradient: gtilde = (1 - alpha) g1 + alpha g2")
    prox_weight: float = option(0.1, ge=0, symbol="1/lambda",
                                help="prox-term weight 1/lambda: step adds (1/lambda)(w - x); 0 = no prox term and no prox-correction")
    prox_correction: bool = option(True, help="apply and keep the prox-correction ghat_i (Alg. 1 lines 11, 13); "
                                              "false = the Table 7 ablation without it (a FedProx step on the "
                                              "quasi-gradient, upload w_K - x, no per-client store)")
    variant: str = option("released-code", choices=VARIANTS,
                          help="'paper': Algorithm 1 (upload xhat_i, server averages the participants); "
                               "'released-code': the authors' code's server rule (upload w_K - x, server "
                               "x <- mean_S w_i - lambda (1/N) sum_all ghat_i, FedDyn's rule), stable under partial participation")


class FedSpeedSolver(LocalSolver):
    """FedSpeed's client (Algorithm 1 of the paper); see the module docstring."""

    keeps_gradient = False      # g1 is scaled into a new tensor before the 2nd call (client.base.GradFn)
    client_state_names = (PROX_CORRECTION,)

    def __init__(self, options: FedSpeedOptions):
        super().__init__(options)
        self.rho0 = options.rho0
        self.alpha = options.alpha
        self.prox_weight = options.prox_weight
        self.variant = options.variant
        self.prox_correction = options.prox_correction
        if not self.prox_correction:
            self.client_state_names = ()      # no ghat_i: the engine keeps no [N, d] store for it

    def begin(self, x, client_state, broadcast, learning_rate, context=None) -> dict[str, Any]:
        return {"prox_correction": client_state[PROX_CORRECTION]} if self.prox_correction else {}

    def quasi_gradient(self, w: torch.Tensor, grad_fn: GradFn) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss at w, gtilde)`` with clipping and weight decay applied to ``gtilde``."""
        loss, first = grad_fn(w)
        perturbed = ascent_point(w, first, self.rho0)
        # Scale g1 into a new tensor before the second call overwrites the shared gradient buffer.
        merged = (1 - self.alpha) * first
        _, second = grad_fn(perturbed)
        merged = merged + self.alpha * second
        merged = self.regularize(merged, w)
        return loss, merged

    def direction(self, w: torch.Tensor, x: torch.Tensor, grad_fn: GradFn,
                  local: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        loss, gtilde = self.quasi_gradient(w, grad_fn)
        if not self.prox_correction:
            return loss, gtilde + self.prox_weight * (w - x)
        return loss, gtilde - local["prox_correction"] + self.prox_weight * (w - x)

    def finish(self, x, w, local, client_state, num_steps, learning_rate):
        offset = w - x
        if not self.prox_correction:
            return offset, {}, {}
        correction = client_state[PROX_CORRECTION] - self.prox_weight * offset
        if self.variant == "paper" and self.prox_weight > 0:
            delta = offset - correction / self.prox_weight       # xhat_i - x = w_K - x - lambda ghat_i
        else:
            # released-code: the server applies the correction (make_fedspeed_server); without a
            # prox term ghat_i == 0 and xhat_i = w_K.
            delta = offset
        return delta, {PROX_CORRECTION: correction}, {}

    def effective_steps(self, num_steps: torch.Tensor, learning_rate: float) -> torch.Tensor:
        # The local recursion contracts towards x by (1 - eta_l / lambda) per step (paper eq. 2).
        return prox_effective_steps(num_steps, learning_rate, self.prox_weight)


def uses_dual(client: FedSpeedOptions) -> bool:
    """Whether the server keeps FedDyn's ``h`` (released-code variant with a prox-correction)."""
    return client.variant == "released-code" and client.prox_weight > 0 and client.prox_correction


@CLIENT_SOLVERS.register("fedspeed", FedSpeedOptions)
def make_fedspeed(options: FedSpeedOptions) -> LocalSolver:
    """FedSpeed (Sun et al. 2023, Alg. 1): perturbed quasi-gradient, prox term and prox-correction; upload xhat_i."""
    return FedSpeedSolver(options)


def gradient_step(options: ServerOptions, client: FedSpeedOptions) -> bool | NotAGradientStep:
    """The paper's rule is a gradient step; FedDyn's rule (released-code variant with the dual) is not."""
    return NOT_A_GRADIENT_STEP if uses_dual(client) else True


@SERVERS.register("fedspeed", ServerOptions, client="fedspeed", client_options_cls=FedSpeedOptions,
                  gradient_step=gradient_step)
def make_fedspeed_server(options: ServerOptions, client: FedSpeedOptions) -> ComposedServer:
    """FedSpeed's server: x <- x + eta_g mean_S (xhat_i - x) (paper); FedDyn's rule for variant released-code."""
    if uses_dual(client):
        return server_method(FedDynAggregator(client.prox_weight), SGDOptimizer(options.learning_rate), options)
    return server_method(AverageParticipatingAggregator(), SGDOptimizer(options.learning_rate), options)


register_algorithm("fedspeed", client="fedspeed", server="fedspeed")
