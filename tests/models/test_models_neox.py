"""The GPT-NeoX sequence classifier with the tiny config (needs transformers; skipped without it)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call, stack_module_state, vmap

pytest.importorskip("transformers")

from fedhet.core.options import ConfigError  # noqa: E402
from fedhet.models import build_model, count_parameters  # noqa: E402

PAD = 1


def tiny(seed=0, length=12, classes=4, **options):
    torch.manual_seed(seed)
    return build_model("neox_classifier", (length,), classes, config="tiny", pad_token_id=PAD, **options)


def token_batch(batch=3, length=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, 1000, (batch, length), generator=g)
    ids[0, 8:] = PAD  # right-padded example
    return ids


def test_tiny_output_shape_and_only_constant_buffers():
    model = tiny()
    out = model(token_batch())
    assert out.shape == (3, 4) and out.dtype == torch.float32
    buffers = dict(model.named_buffers())
    assert all("rotary_emb" in name for name in buffers)  # documented constants
    assert all(name not in model.state_dict() for name in buffers)  # registered non-persistent


def test_tiny_parameter_count_by_hand():
    h, inner, vocab, layers, classes = 32, 128, 1000, 2, 4
    per_layer = 2 * (2 * h) + (h * 3 * h + 3 * h) + (h * h + h) + (h * inner + inner) + (inner * h + h)
    expected = vocab * h + layers * per_layer + 2 * h + h * classes  # embeddings, layers, final LN, head
    assert count_parameters(tiny()) == expected == 57_600


def test_pythia_70m_parameter_count_on_meta_device():
    # Pythia-70M has 70,426,624 parameters including its 50304 x 512 output embedding; the classifier
    # replaces that with a bias-free 512 x 4 head.
    with torch.device("meta"):
        model = build_model("neox_classifier", (128,), 4)
    assert count_parameters(model) == 70_426_624 - 50304 * 512 + 512 * 4
    config = model.model.config
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads,
            config.intermediate_size, config.vocab_size, config.max_position_embeddings) == \
        (512, 6, 8, 2048, 50304, 2048)


def test_right_padding_does_not_change_the_prediction():
    model = tiny().eval()
    ids = token_batch()
    out = model(ids)
    unpadded = model(ids[:1, :8])
    torch.testing.assert_close(out[0], unpadded[0])


def test_functional_call_vmap_and_gradients():
    models = [tiny(seed=s).eval() for s in (0, 1)]
    base = models[0]
    ids = torch.stack([token_batch(seed=0), token_batch(seed=1)])
    y = torch.tensor([[0, 1, 2], [3, 2, 1]])
    params, _ = stack_module_state(models)

    def loss(p, xb, yb):
        return F.cross_entropy(functional_call(base, p, (xb,)), yb)

    logits = vmap(lambda p, xb: functional_call(base, p, (xb,)))(params, ids)
    grads = vmap(torch.func.grad(loss))(params, ids, y)
    for k, model in enumerate(models):
        torch.testing.assert_close(logits[k], model(ids[k]))
        model.zero_grad()
        F.cross_entropy(model(ids[k]), y[k]).backward()
        for name, p in model.named_parameters():
            assert p.grad is not None and p.grad.abs().sum() > 0, f"no gradient reaches {name}"
            torch.testing.assert_close(grads[name][k], p.grad, atol=1e-6, rtol=1e-4)


def test_overrides_and_validation():
    model = tiny(hidden_size=16, num_heads=4, num_layers=1, vocab_size=50)
    config = model.model.config
    assert (config.hidden_size, config.num_attention_heads, config.num_hidden_layers, config.vocab_size) == \
        (16, 4, 1, 50)
    with pytest.raises(ConfigError, match="num_heads"):
        tiny(num_heads=3)
    with pytest.raises(ConfigError, match="pad_token_id"):
        build_model("neox_classifier", (8,), 4, config="tiny", pad_token_id=1000)
    with pytest.raises(ValueError, match="exceeds"):
        tiny(length=513)
    with pytest.raises(ValueError, match="sequence_length"):
        build_model("neox_classifier", (3, 8), 4, config="tiny")


def test_pretrained_path_loads_local_weights(tmp_path):
    source = tiny(seed=5)
    source.model.save_pretrained(tmp_path)
    torch.manual_seed(9)
    loaded = build_model("neox_classifier", (12,), 4, pretrained_path=str(tmp_path), pad_token_id=PAD)
    for (name, a), (_, b) in zip(source.named_parameters(), loaded.named_parameters()):
        assert torch.equal(a, b), name
    assert loaded.model.config.hidden_size == 32


def test_pretrained_path_errors(tmp_path):
    with pytest.raises(ConfigError, match="not a directory"):
        build_model("neox_classifier", (12,), 4, pretrained_path=str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="cannot be combined"):
        build_model("neox_classifier", (12,), 4, pretrained_path=str(tmp_path), hidden_size=64)


def test_same_seed_same_initialisation():
    vector = lambda m: torch.nn.utils.parameters_to_vector(m.parameters())  # noqa: E731
    assert torch.equal(vector(tiny(seed=3)), vector(tiny(seed=3)))
    assert not torch.equal(vector(tiny(seed=3)), vector(tiny(seed=4)))
