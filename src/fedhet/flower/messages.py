"""What travels in Flower messages, and its (de)serialisation: lossless (numpy arrays of the tensors'
own dtype), so a deployment computes on the same bits as a simulation.

- ``query`` (ServerApp -> each SuperNode, once): the reply names the fedhet client ids the node hosts.
- ``train`` (ServerApp -> one SuperNode per round): ``x``, the round, the node's sampled client ids,
  the solver's broadcast (e.g. SCAFFOLD's ``c``), ``eta_l(t)``, and the config's fingerprint (a node
  built from a different config refuses the message); the reply is the node's rows of the
  :class:`~fedhet.core.cohort.Cohort` (deltas, sizes, local steps, losses, extras).
- ``Context.state`` on a SuperNode: one ``ArrayRecord`` per hosted client with its solver state
  (``client_state_names``), and the state a round produced, kept *pending* until the server says it
  accepted that round's reply (``accepted-rounds`` of the next ``train`` message for the client):
  a reply that came after ``round-timeout`` was counted as absent, so its state is dropped.
"""
from __future__ import annotations

import dataclasses
from typing import cast

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

MODEL, BROADCAST, ROUND, UPLOAD, EXTRAS, HOSTED = ("fedhet.model", "fedhet.broadcast", "fedhet.round",
                                                  "fedhet.upload", "fedhet.extras", "fedhet.hosted")
# numpy has no bfloat16: such tensors travel as their raw 16-bit words.
_BFLOAT16_TAG = "bfloat16:"


def to_array(tensor: torch.Tensor) -> Array:
    tensor = tensor.detach().cpu().contiguous()
    if tensor.dtype == torch.bfloat16:
        return Array(tensor.view(torch.int16).numpy().copy())
    return Array(tensor.numpy().copy())


def from_array(array: Array, device: torch.device | str = "cpu", bfloat16: bool = False) -> torch.Tensor:
    tensor = torch.from_numpy(np.array(array.numpy(), copy=True))
    if bfloat16:
        tensor = tensor.view(torch.bfloat16)
    return tensor.to(device)


def tensors_record(tensors: dict[str, torch.Tensor]) -> ArrayRecord:
    record = ArrayRecord()
    for name, tensor in tensors.items():
        key = _BFLOAT16_TAG + name if tensor.dtype == torch.bfloat16 else name
        record[key] = to_array(tensor)
    return record


def record_tensors(record: ArrayRecord, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    out = {}
    for key, array in record.items():
        bf16 = key.startswith(_BFLOAT16_TAG)
        out[key[len(_BFLOAT16_TAG):] if bf16 else key] = from_array(array, device, bfloat16=bf16)
    return out


# Readers of the ConfigRecord fields fedhet writes (TrainRequest.to_content, hosted_content, the client
# app's pending round): Flower types a field as any record value; the cast names the type the writer stored.
def config_int(meta: ConfigRecord, key: str) -> int:
    return int(cast(int, meta[key]))


def config_float(meta: ConfigRecord, key: str) -> float:
    return float(cast(float, meta[key]))


def config_ints(meta: ConfigRecord, key: str) -> list[int]:
    return [int(value) for value in cast(list[int], meta[key])]


@dataclasses.dataclass
class TrainRequest:
    round_index: int
    client_ids: list[int]
    params: torch.Tensor
    broadcast: dict[str, torch.Tensor]
    learning_rate: float
    fingerprint: str
    # Per client of client_ids: the round (0-based) of its last reply the server accepted, -1 for none.
    accepted_rounds: list[int] = dataclasses.field(default_factory=list)

    def to_content(self) -> RecordDict:
        accepted = list(self.accepted_rounds) or [-1] * len(self.client_ids)
        return RecordDict({
            MODEL: tensors_record({"x": self.params}),
            BROADCAST: tensors_record(self.broadcast),
            ROUND: ConfigRecord({"round": self.round_index, "client-ids": [int(i) for i in self.client_ids],
                                 "accepted-rounds": [int(r) for r in accepted],
                                 "learning-rate": float(self.learning_rate), "fingerprint": self.fingerprint}),
        })

    @classmethod
    def from_content(cls, content: RecordDict, device: torch.device | str) -> "TrainRequest":
        meta = content.config_records[ROUND]
        return cls(round_index=config_int(meta, "round"), client_ids=config_ints(meta, "client-ids"),
                   params=record_tensors(content.array_records[MODEL], device)["x"],
                   broadcast=record_tensors(content.array_records[BROADCAST], device),
                   learning_rate=config_float(meta, "learning-rate"), fingerprint=str(meta["fingerprint"]),
                   accepted_rounds=config_ints(meta, "accepted-rounds"))


@dataclasses.dataclass
class Upload:
    """One node's rows of a round's cohort (row ``k`` for ``client_ids[k]``)."""

    client_ids: torch.Tensor      # [K] int64
    deltas: torch.Tensor          # [K, d]
    num_examples: torch.Tensor    # [K] int64
    local_steps: torch.Tensor     # [K] int64
    train_loss: torch.Tensor      # [K]
    extras: dict[str, torch.Tensor]

    def to_content(self) -> RecordDict:
        return RecordDict({
            UPLOAD: tensors_record({"client_ids": self.client_ids, "deltas": self.deltas,
                                    "num_examples": self.num_examples, "local_steps": self.local_steps,
                                    "train_loss": self.train_loss}),
            EXTRAS: tensors_record(self.extras),
        })

    @classmethod
    def from_content(cls, content: RecordDict) -> "Upload":
        rows = record_tensors(content.array_records[UPLOAD])
        return cls(client_ids=rows["client_ids"], deltas=rows["deltas"], num_examples=rows["num_examples"],
                   local_steps=rows["local_steps"], train_loss=rows["train_loss"],
                   extras=record_tensors(content.array_records[EXTRAS]))


def hosted_content(client_ids: list[int], num_clients: int, fingerprint: str) -> RecordDict:
    return RecordDict({HOSTED: ConfigRecord({"client-ids": [int(i) for i in client_ids],
                                             "num-clients": int(num_clients), "fingerprint": fingerprint})})


def hosted_from_content(content: RecordDict) -> tuple[list[int], int, str]:
    meta = content.config_records[HOSTED]
    return config_ints(meta, "client-ids"), config_int(meta, "num-clients"), str(meta["fingerprint"])


def client_state_key(client_id: int) -> str:
    return f"fedhet.client.{int(client_id)}"


def pending_state_key(client_id: int) -> str:
    """The state a client's latest round produced, not yet known to be accepted by the server."""
    return f"fedhet.pending.{int(client_id)}"


def pending_round_key(client_id: int) -> str:
    """The round (a ``ConfigRecord`` ``{"round": r}``) of :func:`pending_state_key`'s state."""
    return f"fedhet.pending-round.{int(client_id)}"
