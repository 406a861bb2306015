"""Every process is registered with documented, validated options."""
import dataclasses

import pytest

import fedhet.participation.bernoulli  # noqa: F401  (registers)
import fedhet.participation.full  # noqa: F401
import fedhet.participation.heterogeneous  # noqa: F401
import fedhet.participation.uniform  # noqa: F401
from fedhet.core.options import ConfigError, build_options, describe_options
from fedhet.core.registry import PARTICIPATION

NAMES = ["bernoulli", "full", "heterogeneous", "uniform"]


@pytest.mark.parametrize("name", NAMES)
def test_registered_with_documented_options_and_warmup_fields(name):
    entry = PARTICIPATION.get(name)
    assert entry.summary
    fields = {f.name: f for f in dataclasses.fields(entry.options_cls)}
    assert {"explore", "startup_round"} <= set(fields)
    assert all(f.metadata.get("help") for f in fields.values())
    assert describe_options(entry.options_cls)
    options = build_options(entry.options_cls, {"explore": True}, section="participation")
    process = entry.factory(options)
    assert callable(process.init) and callable(process.sample) and callable(process.probabilities)


@pytest.mark.parametrize("name, values, message", [
    ("uniform", {"clients_per_round": 0}, r"participation\.clients_per_round = 0: must be >= 1"),
    ("bernoulli", {"ratio": 0.0}, r"participation\.ratio = 0\.0: must be > 0"),
    ("bernoulli", {"ratio": 1.5}, r"participation\.ratio = 1\.5: must be > 0 and <= 1"),
    ("heterogeneous", {"pattern": "periodic"}, r"participation\.pattern = 'periodic': allowed: 'bernoulli'"),
    ("heterogeneous", {"alpha": 0}, r"participation\.alpha"),
    ("heterogeneous", {"floor": -0.1}, r"participation\.floor"),
    ("heterogeneous", {"transition": 0}, r"participation\.transition"),
    ("heterogeneous", {"cycle": 1}, r"participation\.cycle = 1: must be >= 2"),
    ("full", {"explor": True}, r"did you mean participation\.explore"),
])
def test_bad_values_name_the_key_and_what_is_allowed(name, values, message):
    with pytest.raises(ConfigError, match=message):
        build_options(PARTICIPATION.get(name).options_cls, values, section="participation")


def test_heterogeneous_defaults_are_the_papers():
    options = build_options(PARTICIPATION.get("heterogeneous").options_cls, {}, section="participation")
    assert (options.pattern, options.alpha, options.mean, options.floor, options.transition, options.cycle) == \
        ("bernoulli", 0.1, 0.1, 0.02, 0.05, 100)
    assert options.explore is False and options.startup_round is False
