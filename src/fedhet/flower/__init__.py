"""fedhet's methods as Flower apps (docs/flower.md): a ``ServerApp`` that runs any fedhet server method
and a ``ClientApp`` that runs any fedhet local solver, with per-client state on the clients.

Nothing here is imported by ``import fedhet``; the modules that import ``flwr`` are
:mod:`fedhet.flower.server_app`, :mod:`fedhet.flower.client_app`, :mod:`fedhet.flower.messages`,
:mod:`fedhet.flower.backend` and :mod:`fedhet.flower.local_grid` (the extra ``fedhet[flower]``).
"""
