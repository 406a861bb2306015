"""The FedSpeed claim's pilot rule (fedhet.lab.claims.pilot) on hand-made validation curves."""
from __future__ import annotations

import pytest

from fedhet.lab.claims.pilot import first_round_reaching, pilot


def _curve(values):
    return [{"round": t, "val_accuracy": v, "test_accuracy": 0.0} for t, v in enumerate(values, 1)]


def test_target_and_deltas_by_hand():
    rounds = 20                                   # the last 10%: rounds 19 and 20
    fedspeed = _curve([0.5] * 10 + [0.86] * 8 + [0.87, 0.89])     # last10 = 0.88
    fedavg = _curve([0.5] * 14 + [0.872] * 6)                     # reaches 0.871 at round 15
    scaffold = _curve([0.5] * 20)                                 # never reaches it
    result = pilot({"fedspeed": fedspeed, "fedavg": fedavg, "scaffold": scaffold}, rounds)
    assert result.best_method == "fedspeed" and result.last10["fedspeed"] == pytest.approx(0.88)
    # 0.99 * 0.88 = 0.8712, rounded down to 0.1 point
    assert result.target == 0.871
    assert result.rounds == {"fedspeed": 20, "fedavg": 15, "scaffold": None}
    # ceil(0.1 * 15) = 2; never: ceil(0.1 * 21) = 3; at least 1
    assert result.deltas == {"fedspeed": 2, "fedavg": 2, "scaffold": 3}


def test_the_test_set_is_never_read():
    records = _curve([0.9] * 10)
    poisoned = [{**r, "test_accuracy": 1.0} for r in records]
    assert pilot({"a": records}, 10) == pilot({"a": poisoned}, 10)
    assert first_round_reaching(records, 0.95) is None


def test_a_pilot_without_validation_accuracy_is_refused():
    with pytest.raises(ValueError, match="pilot run of a: no finite validation accuracy"):
        pilot({"a": [{"round": 1, "test_accuracy": 0.5}]}, 1)


def test_the_pilot_command_reads_run_directories(tmp_path, capsys):
    import json

    from fedhet.cli import main

    for method, values in (("fedspeed", [0.5] * 18 + [0.87, 0.89]), ("fedavg", [0.5] * 14 + [0.872] * 6)):
        run_dir = tmp_path / method
        run_dir.mkdir()
        (run_dir / "config.toml").write_text('[run]\nrounds = 20\n[data]\nname = "synthetic"\n')
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _curve(values)))
    assert main(["claims", "pilot", f"fedspeed={tmp_path / 'fedspeed'}", f"fedavg={tmp_path / 'fedavg'}"]) == 0
    out = capsys.readouterr().out
    assert "target = 0.871" in out and "fedavg: delta = 2    # reached the target at round 15" in out
    assert main(["claims", "pilot", f"fedavg{tmp_path}"]) == 2
    assert "write METHOD=RUN_DIR" in capsys.readouterr().err
