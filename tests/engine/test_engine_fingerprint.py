"""The configuration fingerprint: every resolved key except the resumable ones."""
import pytest

from fedhet.config.schema import load_config
from fedhet.engine.fingerprint import (
    RESUMABLE_KEYS,
    ConfigChangedError,
    check_fingerprint,
    check_resumable_overrides,
    config_fingerprint,
)
from small_run import SMALL


def test_resumable_keys_leave_the_fingerprint_unchanged_and_others_change_it():
    base = load_config(None, SMALL)
    same = load_config(None, [*SMALL, "run.rounds=99", "run.progress=true", "run.threads=2", "run.out_dir=/x"])
    assert config_fingerprint(base) == config_fingerprint(same)
    assert not set(RESUMABLE_KEYS) & set(config_fingerprint(base)["values"])
    for change in ("run.seed=2", "client.learning_rate=0.1", "partition.num_clients=11", "run.dtype=float64"):
        other = load_config(None, [*SMALL, change])
        assert config_fingerprint(other)["sha256"] != config_fingerprint(base)["sha256"], change
        with pytest.raises(ConfigChangedError, match=change.split("=")[0].replace(".", r"\.")):
            check_fingerprint(config_fingerprint(base), other, "dir")
    check_fingerprint(config_fingerprint(base), same, "dir")


def test_only_resumable_keys_may_be_set_on_resume():
    check_resumable_overrides(["run.rounds", "run.progress"])
    with pytest.raises(ConfigChangedError, match="not run.seed"):
        check_resumable_overrides(["run.rounds", "run.seed"])
