"""SCAFFOLD (Karimireddy et al., ICML 2020): the ``scaffold`` solver (:mod:`fedhet.client.scaffold`,
which also defines the server control variate ``c`` it needs) with the unweighted mean over the
participants: ``x <- x + eta_g (1/|S|) sum_{i in S} delta_i``."""
from __future__ import annotations

from fedhet.core.registry import SERVERS, register_algorithm
from fedhet.server.averaging import AverageParticipatingAggregator
from fedhet.server.base import ComposedServer, ServerOptions, SGDOptimizer
from fedhet.server.methods import server_method


@SERVERS.register("scaffold", ServerOptions, gradient_step=True)
def make_scaffold_server(options: ServerOptions) -> ComposedServer:
    """SCAFFOLD's server: x <- x + eta_g mean_S delta_i (c is the solver's server stage)."""
    # Karimireddy et al. 2020, Algorithm 1: the unweighted mean over the participants.
    return server_method(AverageParticipatingAggregator(), SGDOptimizer(options.learning_rate), options)


register_algorithm("scaffold", client="scaffold", server="scaffold")
