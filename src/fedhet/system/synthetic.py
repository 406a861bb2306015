"""A synthetic availability trace: alternating on and off periods with exponential lengths.

Client n starts on with probability ``mean_on / (mean_on + mean_off)`` (the chain's stationary
share) and then alternates on and off periods of exponential length with means ``mean_on`` and
``mean_off`` (a two-state continuous-time Markov chain, the Poisson arrivals Plato issue #101
suggests), until ``horizon`` seconds. With ``spread`` > 0 client n's mean on-period is
``mean_on exp(spread z_n)`` (``z_n`` standard normal from its stream): clients differ in how often
they are available, the heterogeneous participation FedAU is built for. The trace repeats with
period ``horizon``. Client n's draws come from a stream keyed by (seed, "trace", n). No
third-party trace data ships with fedhet; this generator and the converters of
:mod:`fedhet.system.fedscale` are how traces are made.

The trace's size is bounded before anything is drawn: about ``N (1 + horizon / (mean_on + mean_off))``
on-periods are expected, and more than :data:`MAX_TRACE_INTERVALS` is refused. Periods too short
to move the clock (``mean_on`` of 1e-300 s) or a spread that makes one client's periods tiny are
bounded too: the draws stop with the same error once they exceed twice the bound.
"""
from __future__ import annotations

import math

from fedhet.core.seeding import numpy_generator
from fedhet.core.traces import AvailabilityTrace, TraceError, trace_from_spans

# About 100 bytes each while drawn and written: 10^7 on-periods are a file of several hundred MB.
MAX_TRACE_INTERVALS = 10 ** 7
# A log-space sigma of 10 already spreads mean on-periods by e^10 (22,026x) per sigma; beyond it
# exp(spread z) overflows or rounds a client's on-periods to 0 s.
MAX_SPREAD = 10.0


def expected_intervals(num_clients: int, horizon: float, mean_on: float, mean_off: float) -> float:
    """About how many on-periods the trace holds: each client's horizon over a mean on/off cycle,
    and at least one each."""
    return num_clients * (1.0 + horizon / (mean_on + mean_off))


def _too_large(count: float) -> TraceError:
    return TraceError(f"synthetic trace: about {count:.3g} on-periods; at most {MAX_TRACE_INTERVALS:.0e} are "
                      "generated: use fewer --clients, a shorter --horizon or longer --mean-on/--mean-off")


def synthetic_trace(num_clients: int, *, seed: int, horizon: float = 86400.0, mean_on: float = 3600.0,
                    mean_off: float = 3600.0, spread: float = 0.0) -> AvailabilityTrace:
    """The trace of the module docstring; every client is on at least once (a client whose draw
    never turns on gets one on-period at a uniformly drawn time, so no client is never available)."""
    if num_clients < 1 or not horizon > 0 or not mean_on > 0 or not mean_off > 0 or not spread >= 0:
        raise ValueError("synthetic_trace needs num_clients >= 1, positive horizon, mean_on, mean_off and spread >= 0")
    if not all(math.isfinite(value) for value in (horizon, mean_on, mean_off)) or spread > MAX_SPREAD:
        raise ValueError(f"synthetic_trace needs finite horizon, mean_on and mean_off, and spread <= {MAX_SPREAD}")
    if num_clients > MAX_TRACE_INTERVALS:       # one on-period each at least (and no float overflow below)
        raise _too_large(num_clients)
    expected = expected_intervals(num_clients, horizon, mean_on, mean_off)
    if expected > MAX_TRACE_INTERVALS:
        raise _too_large(expected)
    spans, periods = [], []
    steps = 0
    for client in range(num_clients):
        rng = numpy_generator(seed, "trace", client)
        client_on = mean_on * math.exp(spread * float(rng.standard_normal()))
        on = bool(rng.random() < client_on / (client_on + mean_off))
        now, client_spans = 0.0, []
        while now < horizon:
            steps += 1
            if steps > 2 * MAX_TRACE_INTERVALS:
                raise _too_large(steps)
            length = float(rng.exponential(client_on if on else mean_off))
            end = min(horizon, now + length)
            if on and end > now:
                if client_spans and now <= client_spans[-1][1]:
                    # An off period too short to move the float clock: the two on-periods are one.
                    client_spans[-1] = (client_spans[-1][0], end)
                else:
                    client_spans.append((now, end))
            now, on = end, not on
        if not client_spans:
            start = float(rng.uniform(0.0, horizon * 0.9))
            client_spans.append((start, min(horizon, start + client_on)))
        spans.append(client_spans)
        periods.append(horizon)
    return trace_from_spans(spans, periods, "synthetic trace")
