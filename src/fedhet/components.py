"""Imports every component module so that its registry decorators run.

Adding a component = one module plus one line here. A named algorithm (``algorithm = "..."``) is a
module of :mod:`fedhet.algorithms` that registers its pair and any server half that belongs to it.
"""
# isort: off
import fedhet.data.datasets  # noqa: F401  (data.name)
import fedhet.data.paper_datasets  # noqa: F401
import fedhet.data.hf_disk  # noqa: F401  (data.name = "hf": a save_to_disk directory; datasets imported when used)
import fedhet.data.partition  # noqa: F401  (partition.name)
import fedhet.data.flower_partition  # noqa: F401  (partition.name = "flwr": Flower Datasets partitioners)
import fedhet.models  # noqa: F401  (model.name)
import fedhet.participation.uniform  # noqa: F401  (participation.name)
import fedhet.participation.bernoulli  # noqa: F401
import fedhet.participation.full  # noqa: F401
import fedhet.participation.heterogeneous  # noqa: F401
import fedhet.participation.trace  # noqa: F401
import fedhet.client.sgd  # noqa: F401  (client.name)
import fedhet.server.fedavg  # noqa: F401  (server.name)
import fedhet.client.fedprox  # noqa: F401  (client.name)
import fedhet.client.scaffold  # noqa: F401  (client.name)
import fedhet.client.feddyn  # noqa: F401  (client.name)
import fedhet.client.fedcm  # noqa: F401  (client.name)
import fedhet.client.fedadmm  # noqa: F401  (client.name)
import fedhet.client.fedsam  # noqa: F401  (client.name)
import fedhet.client.fedspeed  # noqa: F401  (client.name)
import fedhet.server.adaptive  # noqa: F401  (server.name: fedavgm, fedadagrad, fedadam, fedyogi, fedams, fedamsgrad)
import fedhet.server.fednova  # noqa: F401  (server.name)
import fedhet.server.participation_weighted  # noqa: F401  (server.name: fedau, average_participating, average_all, known_participation)
import fedhet.server.fedmgda  # noqa: F401  (server.name)
import fedhet.algorithms.fedavg  # noqa: F401  (algorithm)
import fedhet.algorithms.scaffold  # noqa: F401  (server.name, algorithm)
import fedhet.algorithms.feddyn  # noqa: F401  (server.name, algorithm)
import fedhet.algorithms.fedadmm  # noqa: F401  (server.name, algorithm)
import fedhet.algorithms.fedspeed  # noqa: F401  (server.name, algorithm)
import fedhet.algorithms.fednova  # noqa: F401  (algorithm)
import fedhet.algorithms.fedaware  # noqa: F401  (server.name, algorithm)
import fedhet.algorithms.fedvarp  # noqa: F401  (server.name)
import fedhet.algorithms.mifa  # noqa: F401  (server.name)
