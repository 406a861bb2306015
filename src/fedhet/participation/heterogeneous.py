"""FedAU's heterogeneous participation: per-client probabilities tied to the label mix, three patterns.

Wang and Ji, "A Lightweight Method for Tackling Unknown Participation Statistics in Federated
Averaging" (FedAU), Section 5 and Appendix C.6.1; rules as in the authors' released code
(``IBM/fedau``, ``util/util.py``), with a cap ``p_n <= 1`` added.

Probabilities (one draw of ``q`` per seed, shared by the three patterns)::

    q ~ Dir(alpha_p 1_C),  kappa_n = client n's normalised label histogram,
    p_n = min(1, max(p_min, <kappa_n, q> mu C))

``E[<kappa_n, q>] = 1/C``, so before the floor and cap ``E[p_n] = mu`` (Eq. C.6.1 with
``lambda = 1/(C mu)``). Patterns, all with stationary participation probability ``p_n``:

- ``bernoulli``: client n joins round t independently with probability ``p_n``.
- ``markov``: a two-state chain per client with ``P(off->on) = a`` and ``P(on->off) = a (1-p_n)/p_n``;
  when the latter exceeds 1 it is set to 1 and ``P(off->on) = p_n/(1-p_n)`` (stationary probability
  still ``p_n``). The chain starts from ``Bernoulli(p_n)`` before round 0 and takes one transition
  per round, round 0 included (as the authors' code does).
- ``cyclic``: a cycle of ``cycle`` rounds, on for ``A_n = max(1, round(cycle p_n))`` consecutive
  rounds and off for ``off_n = max(1, cycle - A_n)`` (period ``L_n = A_n + off_n``). Every client
  starts in its off phase with ``r_n ~ U{0, ..., off_n - 1}`` off rounds left, so it is on in round
  t iff ``(t - r_n) mod L_n < A_n`` (``r_n = 0`` means on from round 0). The realised rate is
  ``A_n / L_n``, not exactly ``p_n``: ``round`` is half-to-even (as ``np.round``) and clients with
  ``p_n < 0.5/cycle`` still join once per period.

Rounds may be empty under all three patterns (the engine skips the server step).
"""
from __future__ import annotations

import abc
import dataclasses
from typing import Any, Generic, NamedTuple, TypeVar, Union

import torch

from fedhet.core.options import option, refuse_inactive
from fedhet.core.registry import PARTICIPATION
from fedhet.participation.base import (
    ParticipationContext,
    ParticipationProcess,
    Stream,
    ids_from_mask,
    participation_generator,
)
from fedhet.participation.warmup import WarmupOptions, with_warmup

PATTERNS = ("bernoulli", "markov", "cyclic")


@dataclasses.dataclass(frozen=True)
class HeterogeneousOptions(WarmupOptions):
    """``[participation]`` options of ``heterogeneous`` (FedAU Appendix C.6; defaults are the paper's)."""

    pattern: str = option("bernoulli", choices=PATTERNS,
                          help="how a client's participation evolves over rounds")
    alpha: float = option(0.1, gt=0, symbol="alpha_p",
                          help="Dirichlet concentration of the class-wise participation vector q; "
                               "smaller = more heterogeneous participation")
    mean: float = option(0.1, gt=0, le=1, symbol="mu",
                         help="target mean participation probability E[p_n] (before floor and cap)")
    floor: float = option(0.02, ge=0, le=1, symbol="p_min",
                          help="lower bound on every p_n (0 in the paper's low-participation study)")
    transition: float = option(0.05, gt=0, le=1, symbol="a",
                               help="markov: probability of switching from off to on (lowered for "
                                    "clients whose on->off probability would exceed 1)")
    cycle: int = option(100, ge=2, help="cyclic: length of a cycle in rounds")

    def validate(self, section: str) -> None:
        # Each pattern's own setting, set under another pattern, would be recorded and change nothing.
        refuse_inactive(self, section, ("transition",), active=self.pattern == "markov",
                        condition=f"{section}.pattern = 'markov'")
        refuse_inactive(self, section, ("cycle",), active=self.pattern == "cyclic",
                        condition=f"{section}.pattern = 'cyclic'")


def _check_label_counts(label_counts: torch.Tensor) -> torch.Tensor:
    if label_counts.dim() != 2:
        raise ValueError(f"client_label_counts must be [N, C] (clients x classes), got shape "
                         f"{tuple(label_counts.shape)}")
    if label_counts.shape[0] == 0 or label_counts.shape[1] == 0:
        raise ValueError(f"client_label_counts is empty (shape {tuple(label_counts.shape)})")
    counts = label_counts.to(torch.float64)
    if bool((counts < 0).any()) or not bool(torch.isfinite(counts).all()):
        raise ValueError("client_label_counts must be finite and non-negative")
    totals = counts.sum(dim=1)
    empty = torch.nonzero(totals == 0).flatten().tolist()
    if empty:
        shown = ", ".join(map(str, empty[:10])) + (" ..." if len(empty) > 10 else "")
        raise ValueError(f"{len(empty)} client(s) hold no examples (ids {shown}); the heterogeneous "
                         "participation probabilities need each client's label histogram")
    return counts / totals[:, None]


def symmetric_dirichlet(concentration: float, size: int, generator: torch.Generator) -> torch.Tensor:
    """One draw of ``Dir(concentration 1_size)`` (float64).

    Normalised Gamma variables, computed in log space as ``log G(a+1) + log(U)/a`` (``G(a) = G(a+1)
    U^{1/a}``): for small concentrations the plain Gamma draws underflow to 0 in float64 (all of them,
    with non-negligible probability, when a is around 1e-3), the log-space form never does.
    """
    # torch._standard_gamma is the sampler behind torch.distributions.Gamma; only it takes a generator
    # (private, hence the ignore).
    shape = torch.full((size,), concentration + 1.0, dtype=torch.float64)
    gamma = torch._standard_gamma(shape, generator=generator)  # pyright: ignore[reportPrivateImportUsage]
    log_gamma = torch.log(gamma)
    uniform = 1.0 - torch.rand(size, generator=generator, dtype=torch.float64)   # in (0, 1]
    return torch.softmax(log_gamma + torch.log(uniform) / concentration, dim=0)


def fedau_participation_probabilities(label_counts: torch.Tensor, *, alpha: float, mean: float,
                                      floor: float, generator: torch.Generator) -> torch.Tensor:
    """``p_n = min(1, max(floor, <kappa_n, q> mean C))`` with ``q ~ Dir(alpha 1_C)`` (FedAU Eq. C.6.1).

    ``label_counts`` is ``[N, C]`` (examples per client and class); ``kappa_n`` is its row n
    normalised to sum 1. Returns ``[N]`` float64. Every client must hold at least one example.
    """
    kappa = _check_label_counts(label_counts)
    num_classes = kappa.shape[1]
    q = symmetric_dirichlet(alpha, num_classes, generator)
    probabilities = (kappa @ q) * (mean * num_classes)
    return probabilities.clamp(min=floor).clamp(max=1.0)


def markov_transition_probabilities(probabilities: torch.Tensor,
                                    transition: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(P(off->on), P(on->off))`` per client with stationary probability ``p_n``.

    ``a`` and ``a (1-p)/p``; where ``a (1-p)/p > 1``: ``p/(1-p)`` and ``1``. ``p = 0`` gives a client
    that never joins, ``p = 1`` one that never leaves.
    """
    p = probabilities.to(torch.float64)
    to_off = torch.where(p > 0, transition * (1 - p) / p.clamp(min=1e-300), torch.full_like(p, torch.inf))
    capped = to_off > 1
    to_on = torch.where(capped, p / (1 - p).clamp(min=1e-300), torch.full_like(p, transition))
    return to_on, torch.where(capped, torch.ones_like(p), to_off)


def markov_step(on: torch.Tensor, uniforms: torch.Tensor, to_on: torch.Tensor,
                to_off: torch.Tensor) -> torch.Tensor:
    """One transition of every chain: an on client leaves when ``u < P(on->off)``, an off client
    joins when ``u < P(off->on)`` (one uniform per client)."""
    return torch.where(on, uniforms >= to_off, uniforms < to_on)


def cyclic_phase_lengths(probabilities: torch.Tensor, cycle: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(A_n, off_n) = (max(1, round(cycle p_n)), max(1, cycle - A_n))`` as int64 (round half to even)."""
    on_rounds = torch.round(cycle * probabilities.to(torch.float64)).to(torch.int64).clamp(min=1)
    return on_rounds, (cycle - on_rounds).clamp(min=1)


def cyclic_active(round_index: int | torch.Tensor, first_on: torch.Tensor, on_rounds: torch.Tensor,
                  period: torch.Tensor) -> torch.Tensor:
    """Whether each client is on in ``round_index``: ``(t - r_n) mod L_n < A_n``.

    ``round_index`` may be a ``[T, 1]`` tensor of rounds, giving the ``[T, N]`` pattern at once.
    """
    return torch.remainder(round_index - first_on, period) < on_rounds


class HeterogeneousBernoulliState(NamedTuple):
    """State of the ``bernoulli`` pattern: ``p_n`` (``[N]`` float64); rounds are keyed by index."""

    probabilities: torch.Tensor


class MarkovState(NamedTuple):
    """State of the ``markov`` pattern after the last round drawn.

    ``to_on``/``to_off`` (``[N]`` float64) are the transition probabilities, ``on`` (``[N]`` bool) the
    chains' state (before round 0: the stationary draw), ``next_round`` the round that comes next
    (a guard against skipping or repeating rounds, which would silently fork the run).
    """

    probabilities: torch.Tensor
    to_on: torch.Tensor
    to_off: torch.Tensor
    on: torch.Tensor
    next_round: int


class CyclicState(NamedTuple):
    """State of the ``cyclic`` pattern: ``A_n`` (``on_rounds``), ``L_n`` (``period``) and ``r_n``
    (``first_on``), ``[N]`` int64 each (module docstring)."""

    probabilities: torch.Tensor
    on_rounds: torch.Tensor
    period: torch.Tensor
    first_on: torch.Tensor


HeterogeneousState = Union[HeterogeneousBernoulliState, MarkovState, CyclicState]


PatternState = TypeVar("PatternState", HeterogeneousBernoulliState, MarkovState, CyclicState)


class _Pattern(abc.ABC, Generic[PatternState]):
    """How one pattern starts (``init``) and which clients are on in a round (``active``); its state
    type is the pattern's own."""

    @abc.abstractmethod
    def init(self, probabilities: torch.Tensor, context: ParticipationContext) -> PatternState:
        ...

    @abc.abstractmethod
    def active(self, state: PatternState, round_index: int,
               context: ParticipationContext) -> tuple[torch.Tensor, PatternState]:
        ...

    def matrix(self, state: PatternState, start_round: int, num_rounds: int,
               context: ParticipationContext) -> tuple[torch.Tensor, PatternState]:
        """``[num_rounds, N]`` masks of consecutive rounds: the same ``active`` calls, minus the
        per-round conversion to ids (for simulations and plots)."""
        matrix = torch.empty(num_rounds, context.num_clients, dtype=torch.bool)
        for offset in range(num_rounds):
            matrix[offset], state = self.active(state, start_round + offset, context)
        return matrix, state


class _BernoulliPattern(_Pattern[HeterogeneousBernoulliState]):
    def init(self, probabilities: torch.Tensor, context: ParticipationContext) -> HeterogeneousBernoulliState:
        return HeterogeneousBernoulliState(probabilities=probabilities)

    def active(self, state: HeterogeneousBernoulliState, round_index: int,
               context: ParticipationContext) -> tuple[torch.Tensor, HeterogeneousBernoulliState]:
        generator = participation_generator(context.seed, Stream.HETEROGENEOUS_BERNOULLI, round_index)
        uniforms = torch.rand(context.num_clients, generator=generator, dtype=torch.float64)
        return uniforms < state.probabilities, state


class _MarkovPattern(_Pattern[MarkovState]):
    def __init__(self, transition: float):
        self.transition = transition

    def init(self, probabilities: torch.Tensor, context: ParticipationContext) -> MarkovState:
        to_on, to_off = markov_transition_probabilities(probabilities, self.transition)
        generator = participation_generator(context.seed, Stream.MARKOV_INITIAL)
        on = torch.rand(context.num_clients, generator=generator, dtype=torch.float64) < probabilities
        return MarkovState(probabilities=probabilities, to_on=to_on, to_off=to_off, on=on, next_round=0)

    def active(self, state: MarkovState, round_index: int,
               context: ParticipationContext) -> tuple[torch.Tensor, MarkovState]:
        expected = int(state.next_round)
        if round_index != expected:
            raise ValueError(f"markov participation is a chain: round {expected} comes next, got "
                             f"round {round_index} (resume from the state saved after round {expected - 1})")
        generator = participation_generator(context.seed, Stream.MARKOV, round_index)
        uniforms = torch.rand(context.num_clients, generator=generator, dtype=torch.float64)
        on = markov_step(state.on, uniforms, state.to_on, state.to_off)
        return on, state._replace(on=on, next_round=round_index + 1)


class _CyclicPattern(_Pattern[CyclicState]):
    def __init__(self, cycle: int):
        self.cycle = cycle

    def init(self, probabilities: torch.Tensor, context: ParticipationContext) -> CyclicState:
        on_rounds, off_rounds = cyclic_phase_lengths(probabilities, self.cycle)
        generator = participation_generator(context.seed, Stream.CYCLIC_OFFSET)
        uniforms = torch.rand(context.num_clients, generator=generator, dtype=torch.float64)
        first_on = torch.floor(uniforms * off_rounds).to(torch.int64)     # U{0, ..., off_n - 1}
        return CyclicState(probabilities=probabilities, on_rounds=on_rounds, period=on_rounds + off_rounds,
                           first_on=first_on)

    def active(self, state: CyclicState, round_index: int,
               context: ParticipationContext) -> tuple[torch.Tensor, CyclicState]:
        return cyclic_active(round_index, state.first_on, state.on_rounds, state.period), state

    def matrix(self, state: CyclicState, start_round: int, num_rounds: int,
               context: ParticipationContext) -> tuple[torch.Tensor, CyclicState]:
        rounds = torch.arange(start_round, start_round + num_rounds)[:, None]
        return cyclic_active(rounds, state.first_on, state.on_rounds, state.period), state


class HeterogeneousParticipation:
    """FedAU's per-client probabilities with a Bernoulli, Markov or cyclic pattern (module docstring)."""

    def __init__(self, options: HeterogeneousOptions):
        if options.pattern not in PATTERNS:
            raise ValueError(f"participation.pattern = {options.pattern!r}: allowed: {', '.join(PATTERNS)}")
        self.options = options
        # Any: the state this process hands back is the one its pattern's own init made.
        self._pattern: _Pattern[Any]
        if options.pattern == "markov":
            self._pattern = _MarkovPattern(options.transition)
        elif options.pattern == "cyclic":
            self._pattern = _CyclicPattern(options.cycle)
        else:
            self._pattern = _BernoulliPattern()

    def init(self, context: ParticipationContext) -> HeterogeneousState:
        label_counts = context.client_label_counts
        if label_counts.dim() != 2 or label_counts.shape[0] != context.num_clients:
            raise ValueError(f"client_label_counts has shape {tuple(label_counts.shape)}; expected "
                             f"[N = {context.num_clients}, C]")
        generator = participation_generator(context.seed, Stream.FEDAU_PROBABILITIES)
        probabilities = fedau_participation_probabilities(
            label_counts, alpha=self.options.alpha, mean=self.options.mean, floor=self.options.floor,
            generator=generator)
        return self._pattern.init(probabilities, context)

    def sample(self, state: HeterogeneousState, round_index: int,
               context: ParticipationContext) -> tuple[torch.Tensor, HeterogeneousState]:
        mask, new_state = self._pattern.active(state, round_index, context)
        return ids_from_mask(mask), new_state

    def participation_matrix(self, state: HeterogeneousState, start_round: int, num_rounds: int,
                             context: ParticipationContext) -> tuple[torch.Tensor, HeterogeneousState]:
        """Rounds ``start_round ..`` as a ``[num_rounds, N]`` bool matrix and the state after them:
        the same draws as that many :meth:`sample` calls (used by ``simulate_participation``)."""
        return self._pattern.matrix(state, start_round, num_rounds, context)

    def probabilities(self, state: HeterogeneousState) -> torch.Tensor:
        """``p_n`` (for ``cyclic`` the realised rate is ``A_n / L_n``, see the module docstring)."""
        return state.probabilities.to(torch.float32)

    def explores(self) -> bool:
        return False          # no exploration sweep: with_warmup wraps the process when asked for one


@PARTICIPATION.register("heterogeneous", HeterogeneousOptions)
def make_heterogeneous(options: HeterogeneousOptions) -> ParticipationProcess:
    """FedAU's label-correlated participation probabilities, Bernoulli / Markov / cyclic patterns."""
    return with_warmup(HeterogeneousParticipation(options), options)
