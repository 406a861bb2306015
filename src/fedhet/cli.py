"""The ``fedhet`` command line: the edge where arguments become a validated configuration.

    fedhet run CONFIG [--set section.key=value ...] [--overwrite]
    fedhet run --resume RUN_DIR
    fedhet check CONFIG [--set ...]          validate and print the resolved config
    fedhet options [SECTION [NAME]]          list components and their options
    fedhet sweep CONFIG [--grid key=v1,v2 ...] [--seeds 1,2,3] [--variants FILE] [--jobs N] ...
    fedhet report RUN_DIR... --out DIR [--target 0.8] [--group-by KEY,...]
    fedhet claims {list,run,report} [--full] [--only ID,...]   the papers' claims and their verdicts

Configuration errors exit with status 2 and a message naming the key, the value and what is allowed.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from fedhet.config.options import ConfigError, describe_options
from fedhet.errors import FedhetError

EXIT_CONFIG_ERROR = 2


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _print_summary(summary: dict) -> None:
    keys = ["name", "algorithm", "rounds", "final_accuracy", "best_accuracy", "last10_accuracy", "e_ludd",
            "rounds_to_target", "wall_seconds", "seconds_per_round", "backend", "device"]
    width = max(len(k) for k in keys)
    for key in keys:
        value = summary.get(key)
        text = f"{value:.4f}" if isinstance(value, float) else str(value)
        print(f"{key:<{width}}  {text}")


def _command_run(args: argparse.Namespace) -> int:
    from fedhet.config.schema import load_config
    from fedhet.engine.runner import resume_run, run_experiment

    if args.resume:
        if args.config or args.set:
            raise ConfigError("--resume", args.resume, "resume takes only the run directory (its config.toml is used)")
        summary = resume_run(args.resume, log=_log)
    else:
        if not args.config:
            raise ConfigError("config", None, "give a TOML config file, or --resume RUN_DIR")
        config = load_config(args.config, args.set or [])
        if args.quiet:
            from dataclasses import replace
            config = replace(config, run=replace(config.run, progress=False))
        summary = run_experiment(config, overwrite=args.overwrite, log=_log)
    _print_summary(summary)
    return 0


def _command_check(args: argparse.Namespace) -> int:
    from fedhet.config.schema import config_to_toml, load_config

    print(config_to_toml(load_config(args.config, args.set or [])), end="")
    return 0


def _command_options(args: argparse.Namespace) -> int:
    from fedhet.config.schema import COMPONENT_SECTIONS, RunOptions, _ensure_components_loaded

    _ensure_components_loaded()
    sections = [args.section] if args.section else ["run", *COMPONENT_SECTIONS]
    for section in sections:
        if section == "run":
            entries = [("", RunOptions, "")]
        elif section in COMPONENT_SECTIONS:
            registry = COMPONENT_SECTIONS[section][0]
            names = [args.name] if args.name else registry.names()
            entries = [(n, registry.get(n, key=f"{section}.name").options_cls,
                        registry.get(n).summary) for n in names]
        else:
            raise ConfigError("section", section, "allowed: run, " + ", ".join(COMPONENT_SECTIONS))
        for name, cls, summary in entries:
            title = f"[{section}]" + (f" name = {name!r}" if name else "")
            print(f"{title}  {summary}".rstrip())
            for key, type_name, default, text in describe_options(cls):
                print(f"    {section}.{key} ({type_name}, default {json.dumps(default, default=str)}): {text}")
            print()
    return 0


def _command_sweep(args: argparse.Namespace) -> int:
    from fedhet.experiments.commands import sweep_command

    return sweep_command(args.config, grids=args.grid or [], seeds=args.seeds, variants=args.variants,
                         only=args.only, sets=args.set or [], out=args.out, jobs=args.jobs,
                         skip_missing=args.skip_missing, overwrite=args.overwrite, dry_run=args.dry_run)


def _command_report(args: argparse.Namespace) -> int:
    from fedhet.experiments.commands import report_command

    return report_command(args.run_dirs, out=args.out, targets=args.target, group_by=args.group_by,
                          last_rounds=args.last_rounds, title=args.title)


def _add_experiment_commands(sub) -> None:
    sweep = sub.add_parser("sweep", help="run settings x seeds (resumable: finished runs are skipped)",
                           description="Run the cross product of variants, --grid axes and --seeds over CONFIG. "
                                       "Run names: <base>[__<variant>][__key=value...]__seed=<s>. Finished runs "
                                       "are skipped, interrupted ones resumed.")
    sweep.add_argument("config", help="TOML experiment file (the base of every run)")
    sweep.add_argument("--grid", action="append", metavar="KEY=V1,V2,...",
                       help="a grid axis, e.g. server.learning_rate=0.1,1 or algorithm=fedavg,scaffold (repeatable)")
    sweep.add_argument("--seeds", metavar="S1,S2,...", help="run seeds (default: the file's run.seed)")
    sweep.add_argument("--variants", metavar="FILE",
                       help="TOML file of named variants ([name] tables of section keys), e.g. the algorithms of a table")
    sweep.add_argument("--only", metavar="NAME,...", help="run only these variants of --variants")
    sweep.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help="override a value in every run")
    sweep.add_argument("--out", metavar="DIR", help="directory of the run directories (default: run.out_dir/run.name)")
    sweep.add_argument("--jobs", type=int, metavar="N",
                       help="runs in parallel, as separate processes with one torch thread each "
                            "(default: one per usable core; 1 runs in this process)")
    sweep.add_argument("--skip-missing", action="store_true",
                       help="leave out (and list) settings that name a component or option not available yet")
    sweep.add_argument("--overwrite", action="store_true",
                       help="rerun from scratch runs whose directory holds a different configuration")
    sweep.add_argument("--dry-run", action="store_true", help="list the runs and their state; run nothing")
    sweep.set_defaults(handler=_command_sweep)
    report = sub.add_parser("report", help="tables (mean ± std over seeds) and plots from run directories",
                            description="Group runs by setting and algorithm; write report.md, report.json and a "
                                        "self-contained report.html with plots into --out.")
    report.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                        help="run directories, or directories holding them (a sweep's --out)")
    report.add_argument("--out", required=True, metavar="DIR", help="output directory of the report")
    report.add_argument("--target", metavar="ACC[,ACC]", help="accuracies for rounds-to-target columns, e.g. 0.8")
    report.add_argument("--group-by", metavar="KEY,...",
                        help="configuration keys that split the tables (default: the varying keys outside "
                             "algorithm/client/server)")
    report.add_argument("--last-rounds", type=int, metavar="N",
                        help="average the last N rounds instead of the last 10%% (FedAU: 200)")
    report.add_argument("--title", help="title of the report")
    report.set_defaults(handler=_command_report)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fedhet", description="Federated optimisation under heterogeneity.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run an experiment, or resume one")
    run.add_argument("config", nargs="?", help="TOML experiment file")
    run.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help="override a config value")
    run.add_argument("--resume", metavar="RUN_DIR", help="continue an interrupted run")
    run.add_argument("--overwrite", action="store_true", help="replace an existing run directory")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.set_defaults(handler=_command_run)
    check = sub.add_parser("check", help="validate a config and print it resolved")
    check.add_argument("config", nargs="?")
    check.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE")
    check.set_defaults(handler=_command_check)
    options = sub.add_parser("options", help="list components and their options")
    options.add_argument("section", nargs="?")
    options.add_argument("name", nargs="?")
    options.set_defaults(handler=_command_options)
    _add_experiment_commands(sub)
    from fedhet.experiments.claims.cli import add_claims_command
    add_claims_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except ConfigError as error:
        print(f"fedhet: configuration error: {error}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    except (FedhetError, FileExistsError, FileNotFoundError) as error:
        print(f"fedhet: {error}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    except KeyboardInterrupt:
        print("fedhet: interrupted; resume with `fedhet run --resume RUN_DIR`", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
