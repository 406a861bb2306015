"""Issue 12, finding 7 (options half): every number must be finite unless the option allows inf."""
import dataclasses
import math

import pytest

from fedhet.config.schema import load_config
from fedhet.core.options import ConfigError, build_options, option


@pytest.mark.parametrize("overrides, key", [
    ({"data.name": "synthetic", "data.alpha": math.inf}, "data.alpha"),
    ({"partition.name": "dirichlet", "partition.alpha": math.inf}, "partition.alpha"),
    ({"client.learning_rate": math.inf}, "client.learning_rate"),
    ({"server.learning_rate": -math.inf}, "server.learning_rate"),
])
def test_infinite_options_are_config_errors(overrides, key):
    with pytest.raises(ConfigError) as info:
        load_config(None, overrides)
    assert info.value.key == key and "must be finite" in str(info.value)


def test_inf_and_nan_from_the_command_line_are_refused():
    for text in ("inf", "-inf", "nan"):
        with pytest.raises(ConfigError, match="client.learning_rate"):
            load_config(None, [f"client.learning_rate={text}"])


@dataclasses.dataclass(frozen=True)
class _Cutoff:
    cutoff: float = option(5.0, gt=0, allow_inf=True, help="never triggers at inf")
    rates: tuple[float, ...] = option((0.1,), help="a list of numbers")


def test_allow_inf_metadata_admits_infinity_but_never_nan():
    assert build_options(_Cutoff, {"cutoff": math.inf}, section="s").cutoff == math.inf
    with pytest.raises(ConfigError, match="not NaN"):
        build_options(_Cutoff, {"cutoff": math.nan}, section="s")
    with pytest.raises(ConfigError, match=r"s\.rates\[1\].*must be finite"):
        build_options(_Cutoff, {"rates": [0.1, math.inf]}, section="s")
