"""The ``fedhet`` command line: the edge where arguments become a validated configuration.

    fedhet run CONFIG [--set section.key=value ...] [--overwrite]
    fedhet run --resume RUN_DIR [--set run.rounds=N]   (only keys that keep the results may change)
    fedhet check CONFIG [--set ...]          validate and print the resolved config
    fedhet check {solver,server} NAME [--module M]   parity, resume and empty-round checks (fedhet.testing)
    fedhet options [SECTION [NAME]]          list components and their options
    fedhet init [--preset NAME] [PATH] [--force] [--list]   write a starter config (a shipped preset)
    fedhet sweep CONFIG [--grid key=v1,v2 ...] [--seeds 1,2,3] [--variants FILE] [--jobs N] ...
                 [--executor ray [--ray-address auto] [--ray-cpus-per-run N]]   runs as Ray tasks
    fedhet report RUN_DIR... --out DIR [--target 0.8] [--group-by KEY,...] [--baseline NAME] [--latex]
    fedhet tune CONFIG --param KEY=SPEC ... [--sampler grid|optuna] [--criterion train_loss@R] ...
    fedhet claims {list,run,report} [--full] [--only ID,...]   the papers' claims and their verdicts
    fedhet flower {app,compare,loopback} CONFIG ...   fedhet methods as Flower apps (docs/flower.md)
    fedhet traces convert FILE --out FILE [--kind capacity|behavior] [--clients N]   FedScale pickles
    fedhet traces generate --clients N --out FILE [--seed S] ...    a synthetic availability trace

Errors print one line, ``fedhet: ...``: configuration and input errors exit with status 2 (the message
names the key, the value and what is allowed), file-system errors (disk full, read-only) with 1, bugs
with 3; ``fedhet --debug COMMAND ...`` shows the traceback instead (see fedhet.error_lines).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Sequence

from fedhet.core.options import ConfigError, describe_options
from fedhet.engine import CLIENT_SUMMARY_KEYS
from fedhet.error_lines import error_line
from fedhet.logs import NORMAL, QUIET, VERBOSE, configure_cli_logging

EXIT_CONFIG_ERROR = 2


def _print_summary(summary: dict) -> None:
    keys = ["name", "algorithm", "rounds", "final_accuracy", "best_accuracy", "last10_accuracy", "e_ludd",
            "rounds_to_target", "wall_seconds", "seconds_per_round", "backend", "device"]
    keys += [key for key in CLIENT_SUMMARY_KEYS if key in summary]
    keys += [key for key in ("virtual_seconds", "virtual_seconds_to_target") if key in summary]
    width = max(len(k) for k in keys)
    for key in keys:
        value = summary.get(key)
        text = f"{value:.4f}" if isinstance(value, float) else str(value)
        print(f"{key:<{width}}  {text}")


def _overrides(args: argparse.Namespace) -> list[str]:
    """``--set`` values, then the ``KEY=VALUE`` words after the config file (Hydra's way of writing
    them: ``fedhet run cfg.toml run.rounds=10`` is ``--set run.rounds=10``)."""
    words = list(getattr(args, "overrides", None) or [])
    if args.config is not None and "=" in args.config and not args.config.endswith(".toml"):
        # `fedhet run --resume DIR run.rounds=20`: argparse put the override in the config's place.
        words.insert(0, args.config)
        args.config = None
    for word in words:
        if "=" not in word:
            raise ConfigError(f"fedhet {args.command}", word, "after the config file only KEY=VALUE overrides may "
                              "follow (e.g. run.rounds=10, the same as --set run.rounds=10)")
    return [*(args.set or []), *words]


def _resume_hint(run_dir: str | Path) -> str:
    from fedhet.engine import resume_command

    return f"resume with `{resume_command(run_dir)}`"


def _command_run(args: argparse.Namespace) -> int:
    from fedhet.config import load_config
    from fedhet.engine import RunExistsError, resume_run, run_experiment

    sets = _overrides(args)
    if args.resume:
        if args.config:
            raise ConfigError("--resume", args.resume, "resume takes only the run directory (its config.toml is used)")
        # --set with --resume may change only what keeps the run's results (run.rounds, run.progress, ...).
        args.interrupt_hint = _resume_hint(args.resume)
        summary = resume_run(args.resume, sets=sets)
    else:
        if not args.config:
            raise ConfigError("config", None, "give a TOML config file, or --resume RUN_DIR")
        config = load_config(args.config, sets)
        if args.quiet:
            from dataclasses import replace
            config = replace(config, run=replace(config.run, progress=False))
        args.interrupt_hint = _resume_hint(Path(config.run.out_dir) / config.run.name)
        try:
            summary = run_experiment(config, overwrite=args.overwrite)
        except RunExistsError as error:
            raise FileExistsError(error.command_line_message()) from None
    _print_summary(summary)
    return 0


def _command_check(args: argparse.Namespace) -> int:
    from fedhet.config import config_to_toml, load_config

    if args.config in _COMPONENT_CHECKS and not Path(args.config).is_file():
        if not args.overrides or "=" in args.overrides[0]:
            raise ConfigError(f"fedhet check {args.config}", None,
                              f"give the registered name to check: fedhet check {args.config} NAME [--module M]")
        args.name = args.overrides.pop(0)
        return _check_component(args, _overrides(args))
    if args.module:
        raise ConfigError("--module", args.module[0], "--module goes with `fedhet check solver|server NAME`")
    config = load_config(args.config, _overrides(args))
    _check_profile_file(config)
    print(config_to_toml(config), end="")
    return 0


def _check_profile_file(config) -> None:
    """Read ``system.profile_file`` as `fedhet run` will when its clock starts (the trace file is read
    with the configuration already), so that `fedhet check` refuses what `fedhet run` would."""
    system = config.system
    if system is None or system.profiles != "file":
        return
    from fedhet.system.profiles import read_profiles

    profiles = read_profiles(system.profile_file)
    clients = getattr(config.partition.options, "num_clients", None)
    if isinstance(clients, int) and clients > 0 and profiles.num_clients != clients:
        raise ConfigError("system.profile_file", system.profile_file,
                          f"lists {profiles.num_clients} clients but partition.num_clients is {clients}")


# `fedhet check solver NAME` / `check server NAME`: fedhet.testing's checks on a registered component.
_COMPONENT_CHECKS = {"solver": "check_solver", "server": "check_server"}


def _check_component(args: argparse.Namespace, sets: list[str]) -> int:
    import fedhet.testing as testing

    testing.import_user_modules(args.module or [])
    check = getattr(testing, _COMPONENT_CHECKS[args.config])
    try:
        result = check(args.name, overrides=sets)
    except testing.ComponentCheckError as error:
        print(f"fedhet: check failed: {error}", file=sys.stderr)
        return 1
    print("\n".join(result.lines()))
    return 0


def _default_text(default: object) -> str:
    """A default as a config file writes it: ``none`` for None (never JSON's ``null``)."""
    return "none" if default is None else json.dumps(default, default=str)


def _option_lines(section: str, cls: type, skip: frozenset = frozenset()) -> list[str]:
    return [f"    {section}.{key} ({type_name}, default {_default_text(default)}): {text}"
            for key, type_name, default, text in describe_options(cls)
            if (key, type_name, _default_text(default), text) not in skip]


def _shared_options(section: str) -> type | None:
    """The options class every component of ``section`` derives from (listed once, not per name)."""
    if section == "client":
        from fedhet.client.base import ClientOptions
        return ClientOptions
    if section == "server":
        from fedhet.server.base import ServerOptions
        return ServerOptions
    return None


def _print_algorithms(name: str | None) -> None:
    from fedhet.core.registry import ALGORITHMS, CLIENT_SOLVERS, SERVERS

    if name is not None and name not in ALGORITHMS:
        raise ConfigError("algorithm", name, "unknown algorithm; allowed: " + ", ".join(sorted(ALGORITHMS)))
    print("[algorithm]  a named pair: algorithm = NAME sets client.name and server.name "
          "(`fedhet options client|server NAME` lists each half's options)")
    for key in [name] if name else sorted(ALGORITHMS):
        pair = ALGORITHMS[key]
        print(f"    algorithm = {key!r}: client {pair.client!r} + server {pair.server!r}")
    if name:
        pair = ALGORITHMS[name]
        for section, registry, component in (("client", CLIENT_SOLVERS, pair.client), ("server", SERVERS, pair.server)):
            entry = registry.get(component)
            print(f"\n[{section}] name = {component!r}  {entry.summary}".rstrip())
            print("\n".join(_option_lines(section, entry.options_cls)))
    print()


def _command_options(args: argparse.Namespace) -> int:
    from fedhet.config import COMPONENT_SECTIONS, RunOptions, load_components

    load_components()
    from fedhet.system.asynchronous import AsyncOptions
    from fedhet.system.options import SystemOptions

    sections = [args.section] if args.section else ["run", *COMPONENT_SECTIONS, "system", "asynchronous",
                                                    "algorithm"]
    for section in sections:
        if section == "algorithm":
            _print_algorithms(args.name)
            continue
        shared = _shared_options(section) if not args.name else None
        skip: frozenset = frozenset()
        if section == "run":
            entries = [("", RunOptions, "")]
        elif section == "system":
            entries = [("", SystemOptions, "optional: the virtual clock (docs/system.md)")]
        elif section == "asynchronous":
            entries = [("", AsyncOptions, "optional: FedBuff / FedAsync on the virtual clock (docs/async.md)")]
        elif section in COMPONENT_SECTIONS:
            registry = COMPONENT_SECTIONS[section][0]
            names = [args.name] if args.name else registry.names()
            entries = [(n, registry.get(n, key=f"{section}.name").options_cls,
                        registry.get(n).summary) for n in names]
        else:
            raise ConfigError("section", section,
                              "allowed: run, " + ", ".join(COMPONENT_SECTIONS) + ", system, asynchronous, algorithm")
        if shared is not None:
            # Options every component of the section takes, listed once; each name then lists only its
            # own (and any shared option whose default or meaning it changes).
            print(f"[{section}]  options every {section} component takes "
                  f"(`fedhet options {section} NAME` lists one component's in full)")
            print("\n".join(_option_lines(section, shared)))
            print()
            skip = frozenset((key, type_name, _default_text(default), text)
                             for key, type_name, default, text in describe_options(shared))
        for name, cls, summary in entries:
            title = f"[{section}]" + (f" name = {name!r}" if name else "")
            print(f"{title}  {summary}".rstrip())
            lines = _option_lines(section, cls, skip)
            print("\n".join(lines) if lines else f"    (only the options every {section} component takes)")
            print()
    return 0


def _command_init(args: argparse.Namespace) -> int:
    from fedhet.presets import DEFAULT_PRESET, preset_names, write_preset

    if args.list:
        print("\n".join(preset_names(groups=True)))
        return 0
    path = write_preset(args.preset or DEFAULT_PRESET, args.path, overwrite=args.force)
    print(f"wrote {path}; run it with: fedhet run {path}")
    return 0


def _command_traces_convert(args: argparse.Namespace) -> int:
    from fedhet.system.fedscale import convert

    if args.clients is not None and args.clients < 1:
        raise ConfigError("--clients", args.clients, "must be at least 1")
    print(convert(args.file, args.out, kind=args.kind, clients=args.clients))
    return 0


def _command_traces_generate(args: argparse.Namespace) -> int:
    from fedhet.core.traces import write_trace
    from fedhet.system.synthetic import MAX_SPREAD, synthetic_trace

    for flag, value in (("--clients", args.clients), ("--horizon", args.horizon), ("--mean-on", args.mean_on),
                        ("--mean-off", args.mean_off)):
        if not value > 0:
            raise ConfigError(flag, value, "must be positive")
        if isinstance(value, float) and not math.isfinite(value):     # a trace of an infinite horizon never ends
            raise ConfigError(flag, value, "must be a finite number")
    if not args.spread >= 0:
        raise ConfigError("--spread", args.spread, "must be 0 or more")
    if not args.spread <= MAX_SPREAD:
        raise ConfigError("--spread", args.spread, f"must be at most {MAX_SPREAD:g} (a factor e^{MAX_SPREAD:g} per sigma)")
    trace = synthetic_trace(args.clients, seed=args.seed, horizon=args.horizon, mean_on=args.mean_on,
                            mean_off=args.mean_off, spread=args.spread)
    write_trace(trace, args.out)
    print(f"{args.out}: synthetic availability of {trace.num_clients} clients")
    return 0


def _add_traces_command(sub: argparse._SubParsersAction) -> None:
    traces = sub.add_parser("traces", help="availability traces and device profiles (docs/system.md)")
    actions = traces.add_subparsers(dest="traces_command", required=True)
    convert = actions.add_parser("convert", help="FedScale's client_device_capacity or client_behave_trace pickle "
                                                 "to fedhet's plain profile or trace file",
                                 description="Read the pickle with a reader that admits only dicts, lists, "
                                             "strings and numbers; write a profile file (capacity) or an "
                                             "availability trace (behavior) as .csv or .json.")
    convert.add_argument("file", metavar="FILE", help="FedScale pickle")
    convert.add_argument("--out", required=True, metavar="FILE", help="output .csv or .json")
    convert.add_argument("--kind", choices=("capacity", "behavior"),
                         help="which FedScale file it is (default: detected from its structure)")
    convert.add_argument("--clients", type=int, metavar="N", help="keep the first N clients (ascending FedScale id)")
    convert.set_defaults(handler=_command_traces_convert)
    generate = actions.add_parser("generate", help="a synthetic availability trace (exponential on/off periods)")
    generate.add_argument("--clients", type=int, required=True, metavar="N", help="number of clients")
    generate.add_argument("--out", required=True, metavar="FILE", help="output .csv or .json")
    generate.add_argument("--seed", type=int, default=0, help="seed of the draws (default 0)")
    generate.add_argument("--horizon", type=float, default=86400.0, help="seconds before the trace repeats")
    generate.add_argument("--mean-on", type=float, default=3600.0, help="mean on-period, seconds")
    generate.add_argument("--mean-off", type=float, default=3600.0, help="mean off-period, seconds")
    generate.add_argument("--spread", type=float, default=0.0,
                          help="sigma of log mean on-period across clients (0: every client alike)")
    generate.set_defaults(handler=_command_traces_generate)
    for command in (convert, generate):
        _add_verbosity(command)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fedhet", description="Federated optimisation under heterogeneity.")
    parser.add_argument("--debug", action="store_true",
                        help="show the traceback of an error (default: one line, 'fedhet: ...')")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run an experiment, or resume one")
    run.add_argument("config", nargs="?", help="TOML experiment file")
    run.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                     help="overrides after the file, e.g. run.rounds=10 (the same as --set run.rounds=10)")
    run.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help="override a config value")
    run.add_argument("--resume", metavar="RUN_DIR", help="continue an interrupted run")
    run.add_argument("--overwrite", action="store_true", help="replace an existing run directory")
    run.add_argument("--quiet", action="store_true", help="no progress bar; print warnings only")
    run.set_defaults(handler=_command_run)
    check = sub.add_parser("check", help="validate a config and print it resolved; or check a registered "
                                         "solver or server method (check solver|server NAME --module M)",
                           description="fedhet check CONFIG: validate and print the resolved config. "
                                       "fedhet check solver NAME / check server NAME [--module M]: run the "
                                       "backend-parity, kill-and-resume and empty-round checks on a registered "
                                       "component (fedhet.testing), e.g. one registered by your module M.")
    check.add_argument("config", nargs="?", help="TOML experiment file (none: every default); or 'solver' / "
                                                 "'server' followed by a registered name")
    check.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                       help="overrides, as --set (with 'solver' or 'server': first the registered name to check)")
    check.add_argument("--module", action="append", metavar="MODULE",
                       help="with check solver|server: import this module (dotted name or .py file) first, "
                            "so that its registrations run (repeatable)")
    check.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                       help="override a config value (with check solver|server: of the checks' small run)")
    check.set_defaults(handler=_command_check)
    options = sub.add_parser("options", help="list components and their options")
    options.add_argument("section", nargs="?", help="run, data, partition, model, participation, client, server, "
                                                    "system, asynchronous or algorithm (none: all)")
    options.add_argument("name", nargs="?", help="one component of the section (none: all)")
    options.set_defaults(handler=_command_options)
    init = sub.add_parser("init", help="write a starter config from a shipped preset",
                          description="Copy a preset config shipped with fedhet to PATH (default: "
                                      "<preset>.toml here), to edit and run with `fedhet run PATH`.")
    init.add_argument("path", nargs="?", metavar="PATH", help="file or directory to write (default: <preset>.toml)")
    init.add_argument("--preset", metavar="NAME", help="preset to write (default: synthetic_quickstart; see --list)")
    init.add_argument("--force", action="store_true", help="replace PATH if it exists")
    init.add_argument("--list", action="store_true",
                      help="list the preset names (the starters, then papers/... and cpu/...) and exit")
    init.set_defaults(handler=_command_init)
    # The lab's verbs (sweep, report, claims, tune, tune-claims), each add_parser / run (fedhet.lab.commands).
    from fedhet.lab.commands import LAB_COMMANDS
    for verb in LAB_COMMANDS:
        verb.add_parser(sub)
    from fedhet.flower.commands import add_flower_command
    add_flower_command(sub)
    _add_traces_command(sub)
    for command in sub.choices.values():
        _add_verbosity(command)
    return parser


def _add_verbosity(command: argparse.ArgumentParser) -> None:
    """``--quiet`` (warnings only) and ``--verbose`` (debug messages) on a subcommand that lacks them."""
    flags = {flag for action in command._actions for flag in action.option_strings}
    if "--quiet" not in flags:
        command.add_argument("--quiet", action="store_true", help="print warnings only")
    if "--verbose" not in flags:
        command.add_argument("--verbose", action="store_true", help="print every message, debug ones included")


def _leftover_hint(args: argparse.Namespace, extra: list[str]) -> str:
    """The one-line message for words argparse did not place, naming the likely mistake."""
    grids = getattr(args, "grid", None) or []
    if grids and not extra[0].startswith("-"):
        key, _, value = grids[-1].partition("=")
        values = ",".join([value, *[w for w in extra if not w.startswith("-")]])
        return (f"fedhet: --grid {grids[-1]} {' '.join(extra)}: a grid axis's values are comma-separated without "
                f"spaces: --grid {key}={values}")
    return f"fedhet {args.command}: unrecognized arguments: {' '.join(extra)} (see fedhet {args.command} --help)"


def _stdout_closed() -> bool:
    """Whether stdout's reader went away (``fedhet options | head``), as opposed to another pipe or
    socket breaking (a Ray node), which is an error to report."""
    try:
        descriptor = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):
        return False                      # a captured or replaced stdout: not ours to judge
    import select
    if not hasattr(select, "poll"):
        return True                       # no poll (Windows): a broken pipe under print is stdout's
    # The write end of a pipe whose reader has gone reports POLLERR (Linux, macOS).
    poller = select.poll()
    poller.register(descriptor, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        print(_leftover_hint(args, extra), file=sys.stderr)
        return EXIT_CONFIG_ERROR
    try:
        return _main(parser, args)
    except BrokenPipeError:
        if not _stdout_closed():
            raise
        # The reader of our output stopped reading (`| head`): nothing to report. stdout is pointed
        # at /dev/null so that the interpreter's final flush does not fail again; 141 = 128 + SIGPIPE,
        # what a command killed by the broken pipe would return.
        import os
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


def _main(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.quiet and args.verbose:
        parser.error("--quiet and --verbose exclude each other")
    # A sweep's terminal shows its progress view; the runs' own messages are in their sweep.log files.
    default = QUIET if args.command == "sweep" else NORMAL
    configure_cli_logging(QUIET if args.quiet else VERBOSE if args.verbose else default)
    try:
        return args.handler(args)
    except KeyboardInterrupt:
        # The hint names the run directory when the command knows one; other commands
        # (sweep, tune, claims: run again; flower loopback: cannot resume) get none.
        hint = getattr(args, "interrupt_hint", None)
        print("fedhet: interrupted" + (f"; {hint}" if hint else ""), file=sys.stderr)
        return 130
    except Exception as error:
        # One line per error, tracebacks only with --debug (fedhet.error_lines states the rule).
        if args.debug or (isinstance(error, BrokenPipeError) and _stdout_closed()):
            raise              # a closed stdout is handled by main: the reader went away
        line, status = error_line(error)
        print(line, file=sys.stderr)
        return status


if __name__ == "__main__":
    sys.exit(main())
