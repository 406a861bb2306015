"""``fedhet tune``: its arguments and what it prints (the search itself is :mod:`fedhet.lab.tuning.search`)."""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Optional, Sequence

from fedhet.lab.commands.executor_flags import add_lockstep_flag
from fedhet.lab.tuning.criteria import Criterion, check_criterion, parse_criterion
from fedhet.lab.tuning.errors import TuneError
from fedhet.lab.tuning.search import SAMPLERS, SearchSettings, run_search
from fedhet.lab.tuning.space import parse_parameter
from fedhet.lab.tuning.trials import ConfigTrialRunner


def tune_command(config: str, params: Sequence[str], *, sampler: str = "grid", trials: Optional[int] = None,
                 criterion: Optional[str] = None, jobs: int = 1, out: Optional[str] = None, seed: int = 0,
                 sets: Sequence[str] = (), command: str = "", lockstep: Optional[str] = None) -> int:
    """``lockstep`` (``off`` / ``on`` / ``auto``; default ``auto``: on a CUDA device only): the trials run
    together are trained in lockstep (``fedhet sweep --lockstep``; docs/tuning.md): every grid point, or
    each batch of ``jobs`` trials Optuna asks for at once. Optuna with ``jobs = 1`` draws each trial from
    the ones finished before it, so its trials run one at a time, alone."""
    from fedhet.config import parse_override
    from fedhet.lab.sweep.options import sweep_options

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    space = tuple(parse_parameter(text) for text in params)
    overrides = dict(parse_override(item) for item in sets)
    lockstep = sweep_options(None, {"lockstep": lockstep}).lockstep
    out_dir = Path(out) if out else Path("runs") / f"tune-{Path(config).stem}"
    runner = ConfigTrialRunner(config, overrides, out_dir / "trials", lockstep=lockstep, log=log)
    base = runner.base
    chosen: Criterion = parse_criterion(criterion) if criterion else Criterion("train_loss", base.run.rounds)
    check_criterion(chosen, rounds=base.run.rounds, eval_every=base.run.eval_every,
                    validation_fraction=float(getattr(base.data.options, "validation_fraction", 0.0)),
                    global_train_loss_every=base.run.global_train_loss_every)
    if sampler == "optuna":
        from fedhet.lab.tuning.optuna_search import import_optuna

        # Optuna logs every trial at INFO; the search prints its own lines and table.
        optuna = import_optuna()
        optuna.logging.set_verbosity(optuna.logging.WARNING)
    if sampler == "optuna" and jobs == 1 and lockstep == "on":
        log("fedhet tune: --lockstep on: Optuna draws each trial from the trials finished before it, so with "
            "--jobs 1 they run one at a time, alone (--jobs N asks for N trials at once, trained in lockstep)")
    settings = SearchSettings(space=space, criterion=chosen, sampler=sampler, trials=trials, seed=seed, jobs=jobs)
    result = run_search(settings, runner, out_dir, command=command, log=log)
    print(result.table())
    best = result.best
    if best is None:        # run_search raises first (require_complete); kept for the type checker
        raise TuneError(f"no trial of the search in {out_dir} completed")
    print(f"\nchosen (trial {best.number}, {chosen.text} = {best.value:.6g}; test metrics not used): "
          + ", ".join(f"{key}={value}" for key, value in best.values.items()))
    print(f"written: {out_dir / 'trials.csv'}, {out_dir / 'best.json'}, {out_dir / 'best.toml'}")
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``tune`` with its flags to the ``fedhet`` sub-command parsers."""
    tune = subparsers.add_parser(
        "tune", help="search hyperparameters of one method, chosen without the test set (resumable)",
        description="Search named config keys of CONFIG by a criterion that never reads the test set "
                    "(docs/tuning.md). Each trial is a run under OUT/trials; running the same command "
                    "again continues the search. Writes OUT/trials.csv, best.json and best.toml.")
    tune.add_argument("config", help="TOML experiment file (the base of every trial)")
    tune.add_argument("--param", action="append", required=True, metavar="KEY=SPEC",
                      help="a searched key: V1,V2,... or log:LOW:HIGH:N or lin:LOW:HIGH:N, e.g. "
                           "client.learning_rate=log:0.001:1:7 (repeatable)")
    tune.add_argument("--sampler", choices=SAMPLERS, default="grid",
                      help="grid (every point) or optuna (TPE with median pruning; needs fedhet[tune])")
    tune.add_argument("--trials", type=int, metavar="N", help="number of Optuna trials")
    tune.add_argument("--criterion", metavar="METRIC[@ROUND]",
                      help="val_accuracy_last10 (mean over the last 10%% of rounds), global_train_loss@ROUND "
                           "(the global model on the whole training set: FedAU's criterion; needs "
                           "run.global_train_loss_every), val_loss[@ROUND], val_accuracy[@ROUND] (val_* need "
                           "data.validation_fraction), or train_loss@ROUND (the clients' local minibatch "
                           "loss); default: train_loss at the last round")
    tune.add_argument("--jobs", type=int, default=1, metavar="N",
                      help="trials in parallel as sweep workers (default 1: in this process; Optuna "
                           "prunes only then)")
    tune.add_argument("--out", metavar="DIR", help="directory of the search (default: runs/tune-<config name>)")
    tune.add_argument("--seed", type=int, default=0, help="seed of the Optuna sampler (default 0)")
    tune.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help="override a value in every trial")
    add_lockstep_flag(tune, runs="trials")
    tune.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """``fedhet tune``: :func:`tune_command` on the parsed flags; the command line is recorded with the
    search (when it is this process's own)."""
    command = "fedhet " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:2] == ["tune"] else ""
    try:
        return _run(args, command)
    except KeyboardInterrupt:
        print("fedhet: interrupted; run the same `fedhet tune` command again to continue the search",
              file=sys.stderr)
        return 130


def _run(args: argparse.Namespace, command: str) -> int:
    return tune_command(args.config, args.param, sampler=args.sampler, trials=args.trials,
                        criterion=args.criterion, jobs=args.jobs, out=args.out, seed=args.seed,
                        sets=args.set or [], command=command, lockstep=args.lockstep)
