"""A trial runner on the federated least-squares problem (fedhet.problems.least_squares): FedAvg with
one full-batch local step, full participation and server step 1, i.e. gradient descent on the
global loss with step ``client.learning_rate``; it records ``train_loss`` every round as the engine does."""
from fedhet.client.base import ClientOptions
from fedhet.core.registry import CLIENT_SOLVERS, SERVERS
from fedhet.engine.simulator import TrainingDivergedError
from fedhet.lab.tuning.trials import TrialRun
from fedhet.problems.least_squares import full_batch_options
from fedhet.server.base import ServerOptions


class LeastSquaresRunner:
    def __init__(self, problem, rounds, *, interrupt_at_call=None, interrupt_at_round=2):
        self.problem, self.rounds = problem, rounds
        self.calls = 0
        self.interrupt_at_call, self.interrupt_at_round = interrupt_at_call, interrupt_at_round

    def run_one(self, name, values, hook):
        self.calls += 1
        options = full_batch_options(self.problem, ClientOptions, learning_rate=values["client.learning_rate"],
                                     steps=1)
        sim = self.problem.simulator(solver=CLIENT_SOLVERS.get("sgd").factory(options),
                                     server=SERVERS.get("fedavg").factory(ServerOptions()))
        records = []
        for _ in range(self.rounds):
            try:
                record, cohort = sim.run_round()
            except TrainingDivergedError as error:
                return TrialRun(records, f"TrainingDivergedError: {error}")
            row = {"round": record["round"], "train_loss": float(cohort.train_loss.mean())}
            records.append(row)
            if self.calls == self.interrupt_at_call and row["round"] == self.interrupt_at_round:
                raise KeyboardInterrupt       # a search killed in the middle of a trial
            if hook(row):
                return TrialRun(records, stopped=True)
        return TrialRun(records)

    def run_batch(self, trials, jobs):
        return {name: self.run_one(name, values, lambda record: False) for name, values in trials}


def optuna_settings(rounds, trials):
    """The Optuna search the tuning tests run on this runner: the local step size on a log grid, seeded."""
    from fedhet.lab.tuning.criteria import Criterion
    from fedhet.lab.tuning.search import SearchSettings
    from fedhet.lab.tuning.space import parse_parameter

    return SearchSettings(space=(parse_parameter("client.learning_rate=log:0.01:10:2"),),
                          criterion=Criterion("train_loss", rounds), sampler="optuna", trials=trials, seed=7,
                          startup_trials=2)


def trial_table(result):
    """Each trial of a search result as (number, state, values, criterion value), for equality checks."""
    return [(t.number, t.state, t.values, t.value) for t in result.trials]
