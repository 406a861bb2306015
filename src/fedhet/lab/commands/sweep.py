"""``fedhet sweep``: its arguments, and the sweep from parsed command-line values to an exit code
(:mod:`fedhet.lab.commands.shared`'s codes: 0 success; 1 some sweep run failed; 2 a configuration or
input error; 130 interrupted).
"""
from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Optional, Sequence, TextIO, cast

from fedhet.config import ConfigError
from fedhet.lab.commands.executor_flags import add_executor_flags, add_lockstep_flag
from fedhet.lab.commands.shared import EXIT_FAILED_RUNS, EXIT_INPUT_ERROR, EXIT_OK, console_streams, run_plan, say


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``sweep`` with its flags to the ``fedhet`` sub-command parsers."""
    sweep = subparsers.add_parser("sweep", help="run settings x seeds (resumable: finished runs are skipped)",
                                  description="Run the cross product of variants, --grid axes and --seeds over "
                                              "CONFIG. Run names: <base>[__<variant>][__key=value...]__seed=<s>. "
                                              "Finished runs are skipped, interrupted ones resumed.")
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
    add_executor_flags(sweep, default="the base file's sweep.executor, else local")
    sweep.add_argument("--ray-transfer", choices=("auto", "files", "shared"),
                       help="ray executor: write run directories in place (shared filesystem), ship their files "
                            "back from the nodes (files), or check per node (auto, the default)")
    add_lockstep_flag(sweep, default="the base file's sweep.lockstep, else auto")
    sweep.add_argument("--ray-max-attempts", type=int, metavar="N",
                       help="ray executor: attempts of a run whose node or worker died (default 3)")
    sweep.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """``fedhet sweep``: :func:`sweep_command` on the parsed flags."""
    return sweep_command(args.config, grids=args.grid or [], seeds=args.seeds, variants=args.variants,
                         only=args.only, sets=args.set or [], out=args.out, jobs=args.jobs,
                         skip_missing=args.skip_missing, overwrite=args.overwrite, dry_run=args.dry_run,
                         executor=args.executor, ray_address=args.ray_address, ray_cpus_per_run=args.ray_cpus_per_run,
                         ray_gpus_per_run=args.ray_gpus_per_run, ray_transfer=args.ray_transfer,
                         ray_max_attempts=args.ray_max_attempts, lockstep=args.lockstep, quiet=args.quiet)


def sweep_command(config: str, *, grids: Sequence[str] = (), seeds: Optional[str] = None,
                  variants: Optional[str] = None, only: Optional[str] = None, sets: Sequence[str] = (),
                  out: Optional[str] = None, jobs: Optional[int] = None, skip_missing: bool = False,
                  overwrite: bool = False, dry_run: bool = False, executor: Optional[str] = None,
                  ray_address: Optional[str] = None, ray_cpus_per_run: Optional[float] = None,
                  ray_gpus_per_run: Optional[float] = None, ray_transfer: Optional[str] = None,
                  ray_max_attempts: Optional[int] = None, lockstep: Optional[str] = None, quiet: bool = False, stdout: Optional[TextIO] = None,
                  stderr: Optional[TextIO] = None) -> int:
    """``executor``, ``lockstep`` and the ``ray_*`` values override the base file's ``[sweep]`` table
    (:mod:`fedhet.lab.sweep.options`); None leaves the table's value. ``quiet``: no progress
    view and no status lines, only errors, left-out settings and failed runs."""
    from fedhet.config import options_to_dict
    from fedhet.lab.sweep.grid import SweepError, load_variants, parse_grid, parse_seeds, select_variants
    from fedhet.lab.sweep.options import sweep_options
    from fedhet.lab.sweep.plan import plan_sweep

    stdout, stderr = console_streams(stdout, stderr)
    try:
        axes = [parse_grid(text) for text in grids]
        seed_list = parse_seeds(seeds) if seeds else None
        variant_list = load_variants(variants) if variants else []
        if only is not None:
            if not variants:
                raise ConfigError("--only", only, "selects variants: give --variants FILE too")
            variant_list = select_variants(variant_list, [name.strip() for name in only.split(",") if name.strip()])
        plan = plan_sweep(config, grids=axes, seeds=seed_list, variants=variant_list, sets=sets, out_dir=out,
                          skip_missing=skip_missing)
        options = sweep_options(options_to_dict(plan.options), {
            "executor": executor, "ray_address": ray_address, "ray_cpus_per_run": ray_cpus_per_run,
            "ray_gpus_per_run": ray_gpus_per_run, "ray_transfer": ray_transfer, "ray_max_attempts": ray_max_attempts,
            "lockstep": lockstep})
    except (ConfigError, SweepError) as error:
        say(f"fedhet sweep: {error}", stderr)
        return EXIT_INPUT_ERROR
    from fedhet.lab.sweep.plan import dropped_options_line

    dropped_line = dropped_options_line(plan.dropped)
    if dropped_line:
        say(f"fedhet sweep: {dropped_line}", stderr)
    for skipped in plan.skipped:
        say(f"fedhet sweep: not run (missing component or option): {skipped.name}: {skipped.reason}", stderr)
    if not plan.runs:
        say("fedhet sweep: nothing to run (every setting was left out)", stderr)
        return EXIT_INPUT_ERROR
    count = len(plan.runs)
    # --quiet: the progress view and the status lines go nowhere; errors and failures still print.
    # _NullStream has every method the progress view and say call (write, flush, isatty).
    status = cast(TextIO, _NullStream()) if quiet else stderr
    say(f"fedhet sweep: {count} runs in {plan.out_dir}", status)
    result = run_plan(plan, command="fedhet sweep", dry_run=dry_run, jobs=jobs, overwrite=overwrite,
                      stdout=stdout, stderr=stderr, options=options, progress=status)
    if isinstance(result, int):
        return result
    ran, failed = len(result.ran), result.failed
    skipped_count = count - ran - len(failed)
    say(f"fedhet sweep: {ran} ran, {skipped_count} already finished, {len(failed)} failed; "
        f"runs in {plan.out_dir}", stderr if failed else status)
    for outcome in failed:
        say(f"failed: {outcome.run.name}: {outcome.error}", stderr)
    say(f"report:  {report_hint(plan.out_dir)}", status)
    from fedhet.engine import sweep_viewer_lines

    for line in sweep_viewer_lines([(run.config.run.name, run.seed, run.run_dir) for run in plan.runs]):
        say(f"view:    {line}", status)
    return EXIT_FAILED_RUNS if failed else EXIT_OK


def report_hint(out_dir: str | Path) -> str:
    """The ``fedhet report`` command for a sweep's directory, each path quoted for the shell so that
    pasting it runs nothing a directory's name holds (``$(...)``, ``;``, spaces)."""
    return f"fedhet report {shlex.quote(str(out_dir))} --out {shlex.quote(str(Path(out_dir) / 'report'))}"


class _NullStream:
    """Where ``--quiet`` sends the progress view (a log-file-like stream that drops everything)."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False
