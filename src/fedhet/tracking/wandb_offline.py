"""The last step that W&B offline run files really hold.

W&B's service buffers an offline run's records and writes them when its buffer fills or the run
finishes, so a killed process can leave fewer steps on disk than it logged (measured: none of the
first rounds of a run killed after round 3). On resume the W&B tracker therefore asks the files, not
its own bookkeeping, which rounds are still missing.

The ``.wandb`` file is a 7-byte header (``:W&B``, a magic number, a version) followed by the LevelDB
log format: 32 KiB blocks of chunks, each a 7-byte header (crc32, length, type FULL=1, FIRST=2,
MIDDLE=3, LAST=4) and its bytes; a record is one FULL chunk or FIRST, MIDDLE..., LAST. Each record
is a ``wandb_internal_pb2.Record``. A torn tail (a write cut by the kill) ends the scan.
"""
from __future__ import annotations

import struct
from pathlib import Path
from typing import Iterator

_BLOCK = 32768
_HEADER = 7


def read_records(path: Path) -> Iterator[bytes]:
    data = path.read_bytes()
    if data[:4] != b":W&B":
        return
    position, partial = _HEADER, b""
    while position + _HEADER <= len(data):
        left_in_block = _BLOCK - position % _BLOCK
        if left_in_block < _HEADER:
            position += left_in_block          # block trailer: padding
            continue
        _crc, length, kind = struct.unpack("<IHB", data[position:position + _HEADER])
        if kind == 0 and length == 0:
            position += left_in_block          # zero-filled rest of a block
            continue
        end = position + _HEADER + length
        if end > len(data):
            return                             # torn tail
        chunk = data[position + _HEADER:end]
        position = end
        if kind == 1:
            yield chunk
        elif kind == 2:
            partial = chunk
        elif kind == 3:
            partial += chunk
        elif kind == 4:
            yield partial + chunk
            partial = b""


def last_offline_step(wandb_dir: Path, run_id: str) -> int:
    """The largest history step in the offline runs of ``run_id`` under ``wandb_dir`` (0: none)."""
    from wandb.proto import wandb_internal_pb2

    last = 0
    for path in wandb_dir.glob(f"offline-run-*-{run_id}/run-{run_id}.wandb"):
        for raw in read_records(path):
            # A protobuf message class, made when the module is imported: no stub declares it.
            record = wandb_internal_pb2.Record()  # pyright: ignore[reportAttributeAccessIssue]
            try:
                record.ParseFromString(raw)
            except Exception:                  # a damaged record: the later ones are not trusted
                break
            if record.WhichOneof("record_type") == "history":
                last = max(last, int(record.history.step.num))
    return last
