"""Restoring a checkpoint puts each tensor where a fresh run keeps it."""
import pytest
import torch

from fedhet.engine import checkpoint as ckpt


def test_restore_places_each_tensor_on_the_device_of_the_fresh_one():
    # A GPU run keeps the model on the GPU but participation draws on the CPU; the saved copies are
    # all on the CPU (checkpoints load with map_location="cpu"). "meta" stands in for the GPU.
    fresh = {"params": torch.empty(3, device="meta"), "participation": {"on": torch.zeros(4, dtype=torch.bool)}}
    saved = {"params": torch.ones(3), "participation": {"on": torch.ones(4, dtype=torch.bool)},
             "added_later": torch.ones(2)}
    restored = ckpt.restore(fresh, saved, "meta")
    assert restored["params"].device.type == "meta"
    assert restored["participation"]["on"].device.type == "cpu"
    assert restored["participation"]["on"].tolist() == [True] * 4
    # No fresh counterpart: the run's device.
    assert restored["added_later"].device.type == "meta"


def test_restore_keeps_values_and_non_tensors():
    saved = {"next_round": 7, "params": torch.arange(3.0), "log": [torch.tensor([1, 2]), "note"]}
    restored = ckpt.restore({"next_round": 0, "params": torch.zeros(3), "log": [torch.zeros(2), ""]}, saved, "cpu")
    assert restored["next_round"] == 7
    assert torch.equal(restored["params"], torch.arange(3.0))
    assert torch.equal(restored["log"][0], torch.tensor([1, 2])) and restored["log"][1] == "note"


def test_typed_states_are_saved_as_plain_dicts_and_restored_to_their_types():
    from fedhet.algorithms.adaptive import AdaptiveState
    from fedhet.algorithms.feddyn import FedDynState
    from fedhet.server.base import NoState, ServerState

    state = {"server": ServerState(aggregator=FedDynState(h=torch.arange(3.0)),
                                   optimizer=AdaptiveState(step=4, first_moment=torch.ones(3),
                                                           second_moment=torch.full((3,), 2.0)),
                                   transforms=(NoState(),), stage=None)}
    loaded = ckpt.decode_checkpoint(ckpt.encode_checkpoint(state))       # torch.load(weights_only=True)
    assert torch.equal(loaded["server"]["aggregator"]["h"], torch.arange(3.0))
    assert type(loaded["server"]) is dict and loaded["server"]["transforms"] == ({},)
    fresh = {"server": ServerState(FedDynState(torch.zeros(3)), AdaptiveState(0, torch.zeros(3), torch.zeros(3)),
                                   (NoState(),), None)}
    restored = ckpt.restore(fresh, loaded, "cpu")["server"]
    assert type(restored) is ServerState and type(restored.aggregator) is FedDynState
    assert type(restored.optimizer) is AdaptiveState and restored.optimizer.step == 4
    assert restored.transforms == (NoState(),) and restored.stage is None
    assert torch.equal(restored.aggregator.h, torch.arange(3.0))
    assert torch.equal(restored.optimizer.second_moment, torch.full((3,), 2.0))


@pytest.mark.parametrize("participation", [
    ["participation.name=heterogeneous", "participation.pattern=markov", "participation.mean=0.4",
     "participation.explore=true"],
    ["participation.name=heterogeneous", "participation.pattern=cyclic", "participation.cycle=3",
     "participation.startup_round=true"],
], ids=["markov-explore", "cyclic-startup"])
def test_typed_participation_states_resume_bitwise_through_a_checkpoint(tmp_path, participation):
    # The warm-up's WarmupState wraps the pattern's own typed state; both are written as plain dicts
    # (read back with weights_only=True) and rebuilt on resume, so the run continues bit for bit.
    from fedhet.config.schema import load_config
    from fedhet.engine.callbacks import read_metrics
    from fedhet.engine.runner import resume_run, run_experiment
    from small_run import SMALL, StopAfter

    def config(name):
        return load_config(None, [*(o for o in SMALL if not o.startswith("participation.")), *participation,
                                  f"run.out_dir={tmp_path}", f"run.name={name}"])

    run_experiment(config("whole"))
    with pytest.raises(KeyboardInterrupt):
        run_experiment(config("cut"), callbacks=[StopAfter(3)])
    saved = ckpt.load_checkpoint(tmp_path / "cut")["simulator"]["participation"]
    assert type(saved) is dict and set(saved) == {"inner", "rounds", "sweep_size"}
    assert type(saved["inner"]) is dict and "probabilities" in saved["inner"]
    resume_run(tmp_path / "cut")

    def values(name):
        return [{k: v for k, v in r.items() if k != "wall_seconds"} for r in read_metrics(tmp_path / name / "metrics.jsonl")]
    assert values("whole") == values("cut")
    assert torch.equal(ckpt.load_checkpoint(tmp_path / "whole")["simulator"]["params"],
                      ckpt.load_checkpoint(tmp_path / "cut")["simulator"]["params"])


def test_typed_participation_state_round_trips_to_its_types():
    from fedhet.participation.heterogeneous import MarkovState
    from fedhet.participation.warmup import WarmupState

    def state(on, next_round):
        return WarmupState(inner=MarkovState(probabilities=torch.full((3,), 0.5), to_on=torch.full((3,), 0.1),
                                             to_off=torch.full((3,), 0.1), on=on, next_round=next_round),
                           rounds=2, sweep_size=2)

    saved = state(torch.tensor([True, False, True]), 7)
    loaded = ckpt.decode_checkpoint(ckpt.encode_checkpoint({"participation": saved}))   # weights_only=True
    restored = ckpt.restore(state(torch.zeros(3, dtype=torch.bool), 0), loaded["participation"], "cpu")
    assert type(restored) is WarmupState and type(restored.inner) is MarkovState
    assert restored.inner.next_round == 7 and restored.inner.on.tolist() == [True, False, True]
    assert (restored.rounds, restored.sweep_size) == (2, 2)
