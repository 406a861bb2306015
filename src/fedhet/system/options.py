"""The ``[system]`` section: client profiles and the round policy of the virtual clock.

Without a ``[system]`` section a run has no clock and computes exactly what it computed before
(docs/system.md). With one, every round gets a duration in virtual seconds from the time model
(:mod:`fedhet.system.time_model`) and the policy (:mod:`fedhet.system.policies`).
"""
from __future__ import annotations

import dataclasses
import math

from fedhet.core.options import ConfigError, option, refuse_inactive

POLICIES = ("sync", "deadline", "overcommit")
PROFILE_SOURCES = ("lognormal", "tiers", "file")
# The keys only the lognormal source reads (tiers have their own speeds, a file its own values).
_LOGNORMAL_KEYS = ("device_flops", "compute_sigma", "uplink_bps", "downlink_bps", "bandwidth_sigma")


@dataclasses.dataclass(frozen=True)
class SystemOptions:
    """``[system]`` options (docs/system.md)."""

    policy: str = option("sync", choices=POLICIES,
                         help="round policy: 'sync' waits for the slowest chosen client; 'deadline' drops (or, "
                              "with partial_work, cuts short) clients that cannot finish within system.deadline; "
                              "'overcommit' chooses ceil(f k) clients and keeps the first k to finish")
    deadline: float = option(math.inf, gt=0, allow_inf=True, symbol="D",
                             help="policy 'deadline': seconds from the round's start by which a client must have "
                                  "uploaded; inf = never")
    partial_work: bool = option(False, help="policy 'deadline': a client that cannot finish trains only the local "
                                            "steps that fit before the deadline (FedNova's setting) instead of "
                                            "being dropped")
    overcommit: float = option(1.3, ge=1, symbol="f",
                               help="policy 'overcommit': clients chosen per round are ceil(f k) of which the k "
                                    "that finish first are kept (FedScale's overcommitment)")
    profiles: str = option("lognormal", choices=PROFILE_SOURCES,
                           help="client profiles: 'lognormal' (speeds and bandwidths drawn per client), 'tiers' "
                                "(three device tiers, docs/system.md), or 'file' (system.profile_file)")
    profile_file: str = option("", help="profiles = 'file': a .csv or .json profile file "
                                        "(docs/system.md, \"Profiles\")")
    device_flops: float = option(2e9, gt=0, help="median device speed in FLOP/s (lognormal)")
    compute_sigma: float = option(0.6, ge=0, le=10, help="sigma of log device speed (lognormal; FedScale's tail_skew "
                                                  "default 0.6; at most 10, whose speeds already span 40 orders "
                                                  "of magnitude)")
    uplink_bps: float = option(2e6, gt=0, help="median uplink bandwidth, bits per second (lognormal)")
    downlink_bps: float = option(1e7, gt=0, help="median downlink bandwidth, bits per second (lognormal)")
    bandwidth_sigma: float = option(0.5, ge=0, le=10, help="sigma of log bandwidth (lognormal; at most 10)")
    latency: float = option(0.05, ge=0, help="one-way latency of every message, seconds (lognormal, tiers)")
    idle_seconds: float = option(60.0, gt=0, help="duration of a round in which no client is available or "
                                                  "none finishes (the server waits and tries again)")

    def validate(self, section: str) -> None:
        if self.profiles == "file" and not self.profile_file:
            raise ConfigError(f"{section}.profile_file", self.profile_file,
                              "profiles = 'file' needs a profile file (.csv or .json)")
        if self.profiles != "file" and self.profile_file:
            raise ConfigError(f"{section}.profile_file", self.profile_file,
                              "is read only with system.profiles = 'file'")
        if self.partial_work and self.policy != "deadline":
            raise ConfigError(f"{section}.partial_work", True, "applies only to system.policy = 'deadline'")
        # A key that only one policy or profile source reads is refused elsewhere, as partial_work is
        # and unknown keys are: a deadline under 'sync' would otherwise be silently ignored.
        refuse_inactive(self, section, ("deadline",), active=self.policy == "deadline",
                        condition=f"{section}.policy = 'deadline' (here {self.policy!r})")
        refuse_inactive(self, section, ("overcommit",), active=self.policy == "overcommit",
                        condition=f"{section}.policy = 'overcommit' (here {self.policy!r})")
        refuse_inactive(self, section, _LOGNORMAL_KEYS, active=self.profiles == "lognormal",
                        condition=f"{section}.profiles = 'lognormal' (here {self.profiles!r})")
        refuse_inactive(self, section, ("latency",), active=self.profiles != "file",
                        condition=f"{section}.profiles = 'lognormal' or 'tiers' (a profile file has its own)")
