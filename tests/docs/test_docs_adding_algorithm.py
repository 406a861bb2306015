"""docs/design.md, "Adding an algorithm", stays true: its worked example is one module that registers
and runs as the rule says, and every module of fedhet/algorithms has the shape the section describes
(title line, rule table, the registrations its tables name) and its one line in components.py."""
import importlib
import pkgutil
import re
import sys

import pytest
import torch

import fedhet.algorithms
import fedhet.components  # noqa: F401  (registers every component)
from docs_modules import ROOT, load
from fedhet.algorithms import build_parts
from fedhet.client.base import ClientOptions
from fedhet.core.registry import ALGORITHMS, CLIENT_SOLVERS, SERVERS
from fedhet.problems.least_squares import full_batch_options, make_least_squares

rules = load("docs/gen_algorithm_rules.py")
DESIGN = ROOT / "docs" / "design.md"
COMPONENTS = ROOT / "src" / "fedhet" / "components.py"
# "<Name> (<Authors>, <Venue Year>)", the preamble's title line of an algorithm module.
TITLE = re.compile(r"^(?P<name>[^()\s][^()]*?) \((?P<authors>[^()]+), (?P<venue>[^,()]*\b(?:19|20)\d\d)\)$")


def _example_block() -> str:
    section = DESIGN.read_text(encoding="utf-8").split("### Adding an algorithm\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```python\n(.*?)^```", section, flags=re.S | re.M)
    assert len(blocks) == 1, "the section shows exactly one module"
    return blocks[0]


def _registered_by(module_name: str) -> dict[str, list[str]]:
    """``{"local": solver names, "server": server names}`` whose factories the module defines."""
    return {table: [name for name in registry.names() if registry.get(name).factory.__module__ == module_name]
            for table, registry in (("local", CLIENT_SOLVERS), ("server", SERVERS))}


def _check_shape(module) -> None:
    doc = module.__doc__ or ""
    title = doc.splitlines()[0] if doc else ""
    assert TITLE.match(title), f"{module.__name__}: title line {title!r} is not '<Name> (<Authors>, <Venue Year>)'"
    tables = rules.rule_rows(doc, where=module.__name__)
    assert tables, f"{module.__name__}: no 'Rule table <id>:' block"
    assert set(tables) <= set(rules.TABLES), f"{module.__name__}: tables {sorted(tables)}"
    registered = _registered_by(module.__name__)
    for table in tables:
        assert registered[table], f"{module.__name__} has a {table!r} rule row but registers no {table} component"


@pytest.fixture
def example_module(tmp_path, monkeypatch):
    package = tmp_path / "design_example"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "fedexp.py").write_text(_example_block(), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        yield importlib.import_module("design_example.fedexp")
    finally:
        # Leave the registries as the other tests expect them.
        SERVERS._entries.pop("fedexp", None)
        ALGORITHMS.pop("fedexp", None)
        for name in ("design_example.fedexp", "design_example"):
            sys.modules.pop(name, None)


def _hand_fedexp(problem, rounds: int, lr: float, steps: int, eta_g: float, epsilon: float):
    """The module docstring's rule, transcribed: full participation, full-batch local GD."""
    x = problem.initial_params.clone()
    etas = []
    for _ in range(rounds):
        g = []
        for client in range(problem.num_clients):
            w = x.clone()
            for _ in range(steps):
                w = w - lr * problem.client_gradient(client, w)
            g.append(x - w)
        g = torch.stack(g)
        mean = g.mean(dim=0)
        eta = max(1.0, float((g * g).sum()) / (2 * len(g) * (float(mean @ mean) + epsilon)))
        etas.append(eta)
        x = x - eta_g * eta * mean
    return x, etas


def test_the_worked_example_registers_and_runs_its_rule(example_module):
    _check_shape(example_module)
    assert _registered_by(example_module.__name__) == {"local": [], "server": ["fedexp"]}
    pair = ALGORITHMS["fedexp"]
    assert (pair.client, pair.server) == ("sgd", "fedexp")
    problem = make_least_squares(num_clients=4, dim=3, examples_per_client=8, optimum_spread=3.0, seed=5)
    lr, steps, eta_g, epsilon = 0.05, 3, 0.8, 1e-3
    solver, server = build_parts(pair.client, full_batch_options(problem, ClientOptions, learning_rate=lr, steps=steps),
                                 pair.server, example_module.FedExPOptions(learning_rate=eta_g, epsilon=epsilon))
    final = problem.simulator(solver=solver, server=server).run(2)
    expected, etas = _hand_fedexp(problem, 2, lr, steps, eta_g, epsilon)
    assert max(etas) > 1.0, "the test problem must exercise the extrapolation (eta_t > 1)"
    assert torch.allclose(final, expected, rtol=0, atol=1e-12)
    # The generator reads the example's row as it reads the shipped modules'.
    assert rules.rule_rows(example_module.__doc__)["server"][0].startswith("| FedExP (Jhunjhunwala 2023) |")


def test_the_example_extrapolates_beyond_fedavg(example_module):
    """With eta_t > 1 the step is longer than the unweighted mean's: the example is not FedAvg in disguise."""
    problem = make_least_squares(num_clients=4, dim=3, examples_per_client=8, optimum_spread=3.0, seed=5)
    options = full_batch_options(problem, ClientOptions, learning_rate=0.05, steps=3)
    solver, server = build_parts("sgd", options, "fedexp", example_module.FedExPOptions())
    fedexp = problem.simulator(solver=solver, server=server).run(1)
    _, etas = _hand_fedexp(problem, 1, 0.05, 3, 1.0, 1e-3)
    plain, _ = _hand_fedexp(problem, 1, 0.05, 3, 1.0, float("inf"))     # eps = inf: eta_t = 1
    x = problem.initial_params
    assert etas[0] > 1.0
    assert torch.allclose(fedexp - x, etas[0] * (plain - x), rtol=1e-12, atol=1e-14)


ALGORITHM_MODULES = sorted(info.name for info in pkgutil.iter_modules(fedhet.algorithms.__path__))


@pytest.mark.parametrize("name", ALGORITHM_MODULES)
def test_every_algorithm_module_has_the_shape_and_one_registry_line(name):
    module = importlib.import_module(f"fedhet.algorithms.{name}")
    _check_shape(module)
    lines = [line for line in COMPONENTS.read_text(encoding="utf-8").splitlines()
             if re.match(rf"import fedhet\.algorithms\.{name}\b", line)]
    assert len(lines) == 1, f"components.py imports fedhet.algorithms.{name} {len(lines)} times; want one line"


def test_the_shape_check_refuses_a_module_without_title_or_table():
    class Fake:
        __name__ = "fedhet.algorithms.fake"
        __doc__ = "Some method, no paper.\n\nRule table server:\n    | Fake | a | b |\n"

    with pytest.raises(AssertionError, match="title line"):
        _check_shape(Fake)
    Fake.__doc__ = "Fake (Nobody, Venue 2024)\n\nNo table.\n"
    with pytest.raises(AssertionError, match="Rule table"):
        _check_shape(Fake)
    Fake.__doc__ = "Fake (Nobody, Venue 2024)\n\nRule table server:\n    | Fake | a | b |\n"
    with pytest.raises(AssertionError, match="registers no server"):
        _check_shape(Fake)
    assert len(ALGORITHM_MODULES) >= 10
