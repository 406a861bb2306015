"""Checkpoints hold data only, are checksummed, and a corrupt latest one falls back to the previous
(issue 12, findings 1, 8 and 13)."""
from __future__ import annotations

import hashlib
import io
import json
import os

import pytest
import torch

from fedhet.engine import checkpoint as ckpt
from fedhet.engine.runner import resume_run, run_experiment
from helpers_reliability import assert_same_run, fedhet_cli
from small_run import StopAfter


class _Planted:
    """What a hostile checkpoint would hold: unpickling it creates a file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _interrupted(small_config, name, stop_round=3, *extra):
    with pytest.raises(KeyboardInterrupt):
        run_experiment(small_config(f"run.name={name}", *extra), callbacks=[StopAfter(stop_round)])


@pytest.mark.parametrize("with_valid_header", [False, True])
def test_a_planted_checkpoint_cannot_run_code(small_config, tmp_path, with_valid_header):
    _interrupted(small_config, "victim")
    run_dir = tmp_path / "victim"
    marker = tmp_path / "pwned"
    buffer = io.BytesIO()
    torch.save({"simulator": _Planted(marker)}, buffer)
    payload = buffer.getvalue()
    if with_valid_header:
        # The attacker also writes a correct header and sha256: the data-only loader still refuses.
        header = {"format": ckpt.FORMAT_VERSION, "payload_bytes": len(payload),
                  "sha256": hashlib.sha256(payload).hexdigest()}
        payload = ckpt.MAGIC + json.dumps(header).encode() + b"\n" + payload
    for name in (ckpt.CHECKPOINT_NAME, ckpt.PREVIOUS_NAME):
        (run_dir / name).write_bytes(payload)
    # Sanity: the plant works when loaded the unsafe way the old code did.
    if not with_valid_header:
        torch.load(run_dir / ckpt.CHECKPOINT_NAME, weights_only=False)
        assert marker.exists()
        marker.unlink()
    if with_valid_header:
        with pytest.raises(ckpt.CheckpointError, match="refused by the data-only loader"):
            resume_run(run_dir)
    else:   # through the command line, as a user would
        proc = fedhet_cli("run", "--resume", str(run_dir))
        assert proc.returncode != 0
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("fedhet: no usable checkpoint"), proc.stderr
    assert not marker.exists(), "unpickling the checkpoint ran code"


def test_a_flipped_mantissa_byte_is_caught_and_the_previous_checkpoint_is_used(small_config, tmp_path):
    run_experiment(small_config("run.name=full"))
    _interrupted(small_config, "cut", 3)          # checkpoints after rounds 0 and 2
    run_dir = tmp_path / "cut"
    data = bytearray((run_dir / ckpt.CHECKPOINT_NAME).read_bytes())
    params = ckpt.read_checkpoint_file(run_dir / ckpt.CHECKPOINT_NAME)["simulator"]["params"]
    # The low (mantissa) byte of the first parameter, found where torch stored it in the payload.
    raw = params.numpy().tobytes()
    at = bytes(data).find(raw[:16])
    assert at > 0
    data[at] ^= 0x01
    (run_dir / ckpt.CHECKPOINT_NAME).write_bytes(bytes(data))
    with pytest.raises(ckpt.CheckpointError, match="sha256"):
        ckpt.read_checkpoint_file(run_dir / ckpt.CHECKPOINT_NAME)
    messages = []
    resume_run(run_dir, log=messages.append)
    assert any("sha256" in m and "previous checkpoint checkpoint.prev.pt (round 0)" in m for m in messages), messages
    assert_same_run(tmp_path / "full", run_dir)


def test_a_truncated_latest_checkpoint_falls_back_and_a_missing_one_too(small_config, tmp_path):
    _interrupted(small_config, "cut", 3)
    run_dir = tmp_path / "cut"
    latest = run_dir / ckpt.CHECKPOINT_NAME
    latest.write_bytes(latest.read_bytes()[:-100])
    with pytest.raises(ckpt.CheckpointError, match="truncated"):
        ckpt.read_checkpoint_file(latest)
    assert ckpt.load_checkpoint(run_dir)["simulator"]["next_round"] == 0
    # A crash between moving checkpoint.pt aside and writing the new one leaves only the previous.
    latest.unlink()
    assert ckpt.load_checkpoint(run_dir)["simulator"]["next_round"] == 0


def test_checkpoints_are_data_only_and_refuse_other_objects(tmp_path):
    state = {"params": torch.arange(3.0), "note": "x", "nested": [1, 2.5, None, (True, torch.float32)]}
    ckpt.save_checkpoint(tmp_path, state)
    ckpt.save_checkpoint(tmp_path, {**state, "note": "second"})
    assert ckpt.read_checkpoint_file(tmp_path / ckpt.PREVIOUS_NAME)["note"] == "x"
    loaded = ckpt.load_checkpoint(tmp_path)
    assert loaded["note"] == "second" and torch.equal(loaded["params"], torch.arange(3.0))
    assert loaded["nested"] == [1, 2.5, None, (True, torch.float32)]
    with pytest.raises(TypeError, match=r"state\.bad is a object"):
        ckpt.save_checkpoint(tmp_path, {"bad": object()})


def test_other_format_and_garbage_are_one_line_errors(tmp_path):
    (tmp_path / ckpt.CHECKPOINT_NAME).write_bytes(b"\x00" * 64)
    with pytest.raises(ckpt.CheckpointError, match="no FEDHET-CHECKPOINT header"):
        ckpt.read_checkpoint_file(tmp_path / ckpt.CHECKPOINT_NAME)
    header = json.dumps({"format": 1, "payload_bytes": 0, "sha256": ""}).encode()
    (tmp_path / ckpt.CHECKPOINT_NAME).write_bytes(ckpt.MAGIC + header + b"\n")
    with pytest.raises(ckpt.CheckpointError, match="format 1, this fedhet reads 2"):
        ckpt.load_checkpoint(tmp_path)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        ckpt.load_checkpoint(tmp_path / "empty")


def test_leftover_temporaries_are_removed_on_resume_and_others_kept(small_config, tmp_path):
    _interrupted(small_config, "cut", 3)
    run_dir = tmp_path / "cut"
    ours = [run_dir / ".checkpoint.pt.k2j4h1_x.tmp", run_dir / ".metrics.jsonl.abcdefgh.tmp"]
    theirs = [run_dir / ".notes.txt.abcdefgh.tmp", run_dir / "checkpoint.pt.mine.tmp"]
    for path in ours + theirs:
        path.write_bytes(b"x")
    resume_run(run_dir)
    assert not any(path.exists() for path in ours)
    assert all(path.exists() for path in theirs)


def test_the_participation_log_grows_with_the_rounds_run(small_config, tmp_path):
    # The round-1 checkpoint of a run planned for 10^6 rounds is as small as one of 6 rounds.
    _interrupted(small_config, "short", 1, "run.checkpoint_every=1")
    _interrupted(small_config, "long", 1, "run.checkpoint_every=1", "run.rounds=1000000")
    sizes = [os.path.getsize(tmp_path / name / ckpt.CHECKPOINT_NAME) for name in ("short", "long")]
    assert abs(sizes[0] - sizes[1]) < 64, sizes
    log = ckpt.load_checkpoint(tmp_path / "long")["simulator"]["participation_log"]
    assert log["packed"].shape == (1, 2)          # one round, 12 clients in 2 bytes
