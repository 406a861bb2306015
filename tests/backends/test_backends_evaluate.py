"""Evaluation: cache-sized forward passes on a CPU, same accuracy and loss as one big pass."""
import torch
import torch.nn.functional as F

from backend_cases import make_task
from fedhet.core.task import CPU_EVAL_ACTIVATION_BYTES, eval_pass_size, eval_passes, evaluate, largest_activation_bytes


def test_evaluate_matches_a_direct_float64_computation():
    task, _ = make_task("model.name=mlp", "model.hidden=[32]", dtype="float64")
    x = task.spec.flatten(task.model, dtype=task.dtype)
    with torch.no_grad():
        logits = torch.func.functional_call(task.model, task.spec.views(x), (task.test.inputs,))
    loss = float(F.cross_entropy(logits, task.test.targets))
    accuracy = float((logits.argmax(1) == task.test.targets).double().mean())
    for batch_size in (1, 7, 10_000):
        got_loss, got_accuracy = evaluate(task, x, batch_size=batch_size)
        assert got_accuracy == accuracy
        assert abs(got_loss - loss) <= 1e-12 * max(1.0, abs(loss))


def test_cpu_passes_keep_the_largest_activation_in_cache():
    task, _ = make_task("model.name=mlp", "model.hidden=[4096]", dtype="float32")
    x = task.spec.flatten(task.model, dtype=task.dtype)
    per_example = largest_activation_bytes(task, x)
    assert per_example == 4096 * 4                     # the hidden layer's output, float32
    size = eval_pass_size(task, x, batch_size=10_000)
    assert size == CPU_EVAL_ACTIVATION_BYTES // per_example
    assert eval_pass_size(task, x, batch_size=100) == 100          # never more than asked
    passes = eval_passes(2000, size)
    assert passes[0] == (0, size) and passes[-1] == (3 * size, 2000)
    assert all(a[1] == b[0] for a, b in zip(passes[:-1], passes[1:]))
