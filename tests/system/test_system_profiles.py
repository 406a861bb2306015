"""Client profiles: drawn per (seed, client), read from the documented files, refused when malformed."""
import math

import pytest

from fedhet.core.options import ConfigError
from fedhet.system.options import SystemOptions
from fedhet.system.profiles import ProfileError, draw_profiles, load_profiles, read_profiles, write_profiles


def test_a_clients_draw_does_not_depend_on_the_federation_size():
    small = draw_profiles(SystemOptions(), 3, seed=5)
    large = draw_profiles(SystemOptions(), 40, seed=5)
    assert small.device_flops.tolist() == large.device_flops[:3].tolist()
    assert small.uplink_bps.tolist() == large.uplink_bps[:3].tolist()
    assert draw_profiles(SystemOptions(), 3, seed=6).device_flops.tolist() != small.device_flops.tolist()


def test_zero_sigma_gives_the_medians_and_seconds_per_sample_from_flops():
    options = SystemOptions(compute_sigma=0.0, bandwidth_sigma=0.0, device_flops=1e9, latency=0.25)
    profiles = draw_profiles(options, 2, seed=1)
    assert profiles.device_flops.tolist() == [1e9, 1e9]
    assert profiles.uplink_bps.tolist() == [options.uplink_bps] * 2
    # c_n = 3 F_model / F_n (forward plus a backward of twice its cost).
    assert profiles.compute_seconds_per_sample(1e6).tolist() == [3e-3, 3e-3]


def test_tiers_take_the_tier_table_values():
    from fedhet.system.profiles import TIERS

    profiles = draw_profiles(SystemOptions(profiles="tiers"), 50, seed=2)
    assert set(profiles.device_flops.tolist()) <= {tier[2] for tier in TIERS}
    assert len(set(profiles.device_flops.tolist())) == 3


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_profile_files_round_trip(tmp_path, suffix):
    profiles = draw_profiles(SystemOptions(), 4, seed=3)
    path = tmp_path / f"profiles{suffix}"
    write_profiles(profiles, path)
    back = read_profiles(path)
    for key, value in profiles.as_dict().items():
        assert [x if not math.isnan(x) else None for x in getattr(back, key).tolist()] == \
            [x if not math.isnan(x) else None for x in value.tolist()], key


@pytest.mark.parametrize("body,message", [
    ("client,device_flops,uplink_bps,downlink_bps,latency\n0,1e9,-5,1e6,0\n", "uplink_bps = '-5'"),
    ("client,device_flops,seconds_per_sample,uplink_bps,downlink_bps\n0,1e9,0.1,1e6,1e6\n", "exactly one"),
    ("client,device_flops,uplink_bps,downlink_bps\n1,1e9,1e6,1e6\n", "0..N-1"),
])
def test_bad_profile_files_are_refused_in_one_line(tmp_path, body, message):
    path = tmp_path / "p.csv"
    path.write_text(body)
    with pytest.raises(ProfileError, match=message) as error:
        read_profiles(path)
    assert "\n" not in str(error.value)


def test_a_profile_file_must_match_the_partition(tmp_path):
    path = tmp_path / "p.csv"
    write_profiles(draw_profiles(SystemOptions(), 3, seed=1), path)
    with pytest.raises(ConfigError, match="lists 3 clients but the partition has 4"):
        load_profiles(SystemOptions(profiles="file", profile_file=str(path)), 4, seed=1)
