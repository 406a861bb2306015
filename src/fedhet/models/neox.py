"""A GPT-NeoX (Pythia) sequence classifier through Hugging Face ``transformers`` (optional extra).

FedAWARE (AISTATS 2025, Section 6) fine-tunes Pythia-70M (Biderman et al. 2023) on AG News. This
model is ``transformers.GPTNeoXForSequenceClassification``: the GPT-NeoX decoder and a bias-free
linear head read at the last token that is not ``pad_token_id`` (the rightmost such token, so pad
*after* the text). Padding positions are also masked out of attention, computed from the ids, so the
module takes only ``int64`` token ids ``[B, L]`` and returns logits ``[B, num_classes]``.
``pad_token_id`` (default 0) must be the id the dataset pads with, and ``vocab_size`` must exceed
every id in the data (fedhet's word tokenizer uses ``data.vocab_size + 2`` ids); ids are not
range-checked in ``forward`` because a value-dependent check cannot run under ``vmap``.

Architecture presets (``config``), each field overridable:

==============  ======  ======  =====  ============  =====  ===========  =============
preset          hidden  layers  heads  intermediate  vocab  rotary pct   max positions
==============  ======  ======  =====  ============  =====  ===========  =============
pythia-70m      512     6       8      2048          50304  0.25         2048
tiny            32      2       2      128           1000   0.25         512
==============  ======  ======  =====  ============  =====  ===========  =============

The pythia-70m preset is Pythia-70M's published architecture (parallel residual, untied
embeddings, rotary base 10000). With 4 classes it has 44,673,024 parameters: Pythia-70M's
70,426,624 less its 25,755,648-parameter output embedding, plus a 512x4 head.

Weights: random initialisation (transformers' own: N(0, 0.02^2) linear/embedding weights) unless
``pretrained_path`` names a *local* directory written by ``save_pretrained``; it is loaded with
``local_files_only=True`` (nothing is ever downloaded), the architecture then comes from the
checkpoint, and the classification head is newly initialised when the checkpoint has none.

Attention runs in ``"eager"`` mode by default because the SDPA path branches on tensor values,
which ``torch.func.vmap`` cannot trace; ``"sdpa"`` is faster for the sequential (non-vmap) path.
The rotary embedding keeps its inverse frequencies as non-persistent buffers: constants computed
from the config, never trained, not part of the flat parameter vector.
"""
from __future__ import annotations

import dataclasses
import os
from types import MappingProxyType
from typing import Any, Optional

import torch
from torch import nn

from fedhet.core.options import ConfigError, option
from fedhet.core.registry import MODELS
from fedhet.models.shapes import ModelShapeError, check_num_classes

INSTALL_HINT = "pip install fedhet[nlp]"

# preset -> GPTNeoXConfig keyword arguments (see the table in the module docstring).
NEOX_PRESETS = MappingProxyType({
    "pythia-70m": MappingProxyType(dict(
        hidden_size=512, num_hidden_layers=6, num_attention_heads=8, intermediate_size=2048,
        vocab_size=50304, rotary_pct=0.25, max_position_embeddings=2048, rotary_emb_base=10000,
        use_parallel_residual=True, tie_word_embeddings=False, bos_token_id=0, eos_token_id=0)),
    "tiny": MappingProxyType(dict(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
        vocab_size=1000, rotary_pct=0.25, max_position_embeddings=512, rotary_emb_base=10000,
        use_parallel_residual=True, tie_word_embeddings=False, bos_token_id=0, eos_token_id=0)),
})

# option name -> GPTNeoXConfig keyword, for the architecture overrides.
_OVERRIDES = MappingProxyType({
    "hidden_size": "hidden_size",
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "intermediate_size": "intermediate_size",
    "vocab_size": "vocab_size",
    "rotary_pct": "rotary_pct",
    "max_positions": "max_position_embeddings",
})


@dataclasses.dataclass(frozen=True)
class NeoXClassifierOptions:
    config: str = option("pythia-70m", choices=tuple(NEOX_PRESETS),
                         help="architecture preset (Pythia-70M, or a tiny one for tests)")
    hidden_size: Optional[int] = option(None, ge=1, help="override: model width")
    num_layers: Optional[int] = option(None, ge=1, help="override: number of transformer layers")
    num_heads: Optional[int] = option(None, ge=1, help="override: attention heads (must divide hidden_size)")
    intermediate_size: Optional[int] = option(None, ge=1, help="override: MLP inner width")
    vocab_size: Optional[int] = option(None, ge=1, help="override: token vocabulary size")
    rotary_pct: Optional[float] = option(None, gt=0.0, le=1.0,
                                         help="override: fraction of each head's dims given rotary embeddings")
    max_positions: Optional[int] = option(None, ge=1, help="override: longest sequence the model takes")
    pad_token_id: int = option(0, ge=0, help="id the dataset pads with (fedhet's AG News pads with 0: the "
                                             "word tokenizer's pad, Pythia's end-of-text)")
    attention: str = option("eager", choices=("eager", "sdpa"),
                            help="attention kernel; eager works under torch.func.vmap, sdpa does not")
    pretrained_path: Optional[str] = option(None, help="local directory with save_pretrained weights "
                                            "(loaded with local_files_only=True); none: random init")

    def overrides(self) -> dict[str, Any]:
        """The GPTNeoXConfig keywords set explicitly by the override options."""
        return {key: getattr(self, name) for name, key in _OVERRIDES.items() if getattr(self, name) is not None}

    def architecture(self) -> dict[str, Any]:
        """The preset with the overrides applied."""
        return {**NEOX_PRESETS[self.config], **self.overrides()}

    def validate(self, section: str) -> None:
        if self.pretrained_path is not None:
            given = [name for name in _OVERRIDES if getattr(self, name) is not None]
            if given:
                raise ConfigError(f"{section}.{given[0]}", getattr(self, given[0]),
                                  "architecture overrides cannot be combined with pretrained_path "
                                  "(the checkpoint fixes the architecture)")
            return
        arch = self.architecture()
        if arch["hidden_size"] % arch["num_attention_heads"] != 0:
            raise ConfigError(f"{section}.num_heads", arch["num_attention_heads"],
                              f"must divide hidden_size ({arch['hidden_size']})")
        if self.pad_token_id >= arch["vocab_size"]:
            raise ConfigError(f"{section}.pad_token_id", self.pad_token_id,
                              f"must be < vocab_size ({arch['vocab_size']})")


class NeoXSequenceClassifier(nn.Module):
    """Token ids ``[B, L]`` -> logits ``[B, num_classes]``, masking ``pad_token_id`` positions."""

    def __init__(self, model: nn.Module, pad_token_id: int):
        super().__init__()
        self.model = model
        self.pad_token_id = pad_token_id

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        attention_mask = (input_ids != self.pad_token_id).long()
        return self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits


def _transformers() -> Any:
    try:
        import transformers
    except ImportError as error:
        raise ImportError(f"model 'neox_classifier' needs the transformers package: {INSTALL_HINT}") from error
    return transformers


def _sequence_length(input_shape: tuple[int, ...], max_positions: int) -> int:
    shape = tuple(input_shape)
    if len(shape) != 1 or not isinstance(shape[0], int) or shape[0] < 1:
        raise ModelShapeError(f"model 'neox_classifier': input_shape = {shape!r}; expected (sequence_length,) "
                         "for int64 token ids of shape [B, L]")
    if shape[0] > max_positions:
        raise ModelShapeError(f"model 'neox_classifier': sequence length {shape[0]} exceeds the model's "
                         f"max_position_embeddings ({max_positions}); truncate the data or raise max_positions")
    return shape[0]


def _load_pretrained(transformers: Any, path: str, options: NeoXClassifierOptions, num_classes: int) -> Any:
    """``GPTNeoXForSequenceClassification`` from the checkpoint at ``path`` (options.pretrained_path).
    Typed Any: transformers is imported on first use, so its classes are unknown to the checker."""
    if not os.path.isdir(path):
        raise ConfigError("model.pretrained_path", path, "not a directory; expected a local directory "
                          "written by save_pretrained (weights are never downloaded)")
    model = transformers.GPTNeoXForSequenceClassification.from_pretrained(
        path, local_files_only=True, num_labels=num_classes, pad_token_id=options.pad_token_id,
        attn_implementation=options.attention)
    if options.pad_token_id >= model.config.vocab_size:
        raise ConfigError("model.pad_token_id", options.pad_token_id,
                          f"must be < the checkpoint's vocab_size ({model.config.vocab_size})")
    return model.float()  # checkpoints may be stored in half precision; fedhet trains in float32


@MODELS.register("neox_classifier", NeoXClassifierOptions)
def make_neox_classifier(options: NeoXClassifierOptions, *, input_shape: tuple[int, ...],
                         num_classes: int) -> NeoXSequenceClassifier:
    """GPT-NeoX (Pythia-70M architecture) sequence classifier via transformers (pip install fedhet[nlp])."""
    transformers = _transformers()
    num_classes = check_num_classes("neox_classifier", num_classes)
    if options.pretrained_path is not None:
        model = _load_pretrained(transformers, options.pretrained_path, options, num_classes)
        _sequence_length(input_shape, model.config.max_position_embeddings)
    else:
        architecture = options.architecture()
        _sequence_length(input_shape, architecture["max_position_embeddings"])  # before the costly build
        config = transformers.GPTNeoXConfig(
            **architecture, num_labels=num_classes, pad_token_id=options.pad_token_id,
            hidden_dropout=0.0, attention_dropout=0.0, use_cache=False,
            attn_implementation=options.attention)
        model = transformers.GPTNeoXForSequenceClassification(config)
    return NeoXSequenceClassifier(model, options.pad_token_id)
