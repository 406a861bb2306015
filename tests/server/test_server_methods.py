"""compose knows no method by name; server_method adds the transforms the common options ask for;
the server modules import one way (no base -> aware -> fedaware -> base cycle)."""
import subprocess
import sys

import torch

import fedhet.components  # noqa: F401  (registers the components)
from fedhet.algorithms.adaptive import AdagradOptimizer, AdamOptimizer, AdaptiveOptions, YogiOptimizer
from fedhet.algorithms.fedams import AMSOptions, FedAMSGradOptimizer, FedAMSOptimizer
from fedhet.core.cohort import Cohort
from fedhet.core.registry import SERVERS
from fedhet.server.averaging import WeightedAverageAggregator
from fedhet.server.aware import AwareProjection
from fedhet.server.base import ComposedServer, NoState, ServerContext, ServerState, SGDOptimizer, compose
from fedhet.server.methods import server_method


def test_compose_takes_the_transforms_it_is_given_and_nothing_else():
    plain = compose(WeightedAverageAggregator(), SGDOptimizer(1.0))
    assert isinstance(plain, ComposedServer) and plain.transforms == () and plain.stage is None
    projection = server_method(WeightedAverageAggregator(), SGDOptimizer(1.0), SERVERS.get("fedavg").options_cls(aware=True)).transforms[0]
    assert compose(WeightedAverageAggregator(), SGDOptimizer(1.0), (projection,)).transforms == (projection,)


def test_every_gradient_step_method_takes_the_aware_transform():
    # Every method built from its own options alone that declares a gradient step (the ones built
    # with their solver's options: the zoo, tests/server/test_server_zoo.py).
    names = [name for name in SERVERS.names() if SERVERS.get(name).client is None
             and SERVERS.get(name).not_a_gradient_step(SERVERS.get(name).options_cls()) is None]
    assert {"fedavg", "fedavgm", "fedadam", "fedyogi", "fedadagrad", "fedams", "fedamsgrad", "fedvarp", "mifa", "fedau",
            "fednova", "fedaware", "fedmgda_plus", "average_all", "average_participating"} <= set(names)
    for name in names:
        entry = SERVERS.get(name)
        method = entry.factory(entry.options_cls(aware=True))
        assert len(method.transforms) == 1 and isinstance(method.transforms[0], AwareProjection), name


def test_importing_the_base_loads_no_method():
    code = ("import sys, fedhet.server.base; "
            "print(sorted(m for m in sys.modules if m.startswith('fedhet.server.') and m != 'fedhet.server.base'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['fedhet.server.aware_options']"


def test_adaptive_methods_are_one_class_each():
    expected = {"fedadagrad": AdagradOptimizer, "fedadam": AdamOptimizer, "fedyogi": YogiOptimizer,
                "fedams": FedAMSOptimizer, "fedamsgrad": FedAMSGradOptimizer}
    for name, cls in expected.items():
        options = (AdaptiveOptions if name in ("fedadagrad", "fedadam", "fedyogi") else AMSOptions)()
        assert type(SERVERS.get(name).factory(options).optimizer) is cls, name


def test_a_composed_step_returns_a_typed_state_and_an_empty_round_keeps_the_optimizer_state():
    server = SERVERS.get("fedadam").factory(AdaptiveOptions())
    context = ServerContext(round_index=0, num_clients=2, make_store=None)
    state = server.init(torch.zeros(3), context)
    assert isinstance(state, ServerState) and state.aggregator == NoState() and state.optimizer.step == 0
    x, after, _ = server.step(state, torch.zeros(3), Cohort.empty(3, torch.float32, "cpu"), context)
    assert after.optimizer is state.optimizer
