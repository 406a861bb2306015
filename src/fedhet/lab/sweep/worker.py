"""Runs of a sweep, in this process or as worker processes.

One run: ``python -m fedhet.lab.sweep.worker RUN_DIR [--resume]``; a new run's resolved
configuration (TOML, as :func:`fedhet.config.schema.config_to_toml` writes it) comes on standard
input, a resumed run uses its saved ``config.toml``. The worker's output goes to the run's
``sweep.log``; its exit status is 0 when the run finished, 1 when it failed (the log ends with the
one-line ``fedhet: ...`` message of a user error, or the traceback of a bug), 2 for a usage error.

Many runs (what the sweep uses): ``python -m fedhet.lab.sweep.worker --serve`` reads one request
per line on standard input, ``{"run_dir": ..., "resume": bool, "config": TOML or null}``, runs it
with everything the process has already paid for (the interpreter, torch and fedhet imported, the
datasets loaded: :class:`fedhet.engine.dataset_cache.DatasetCache`) and answers one line on
standard output, ``{"run_dir": ..., "status": S}``, after the run (S: 0 when it finished, else the
command line's status of its failure: 1 the machine, 2 the run's input, 3 a bug; a malformed request
line is answered with 2 and one stderr line, and the worker goes on). While a run executes, the
process's standard output and error (file descriptors 1 and 2, so C-level messages too) go to that
run's ``sweep.log``. Each run builds its own model, state and random streams from its configuration,
so it computes the same numbers as alone (tests/lab/sweep/test_sweep_worker_serve.py); the
start-up saved is about 2 CPU s a run (benchmarks/README.md, "Claims workload").

With ``--parent-pid`` a worker ends when that process (the sweep) does
(:mod:`fedhet.lab.sweep.lifetime`).
"""
from __future__ import annotations

import json
import os
import sys
import tomllib
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Sequence

from fedhet.config import ExperimentConfig, resolve_config
from fedhet.core import UnsafeLogFileError, open_log_for_append
from fedhet.engine import Callback, DatasetCache
from fedhet.errors import FedhetError
from fedhet.lab.sweep.lifetime import watch_parent

if TYPE_CHECKING:
    from fedhet.engine import LockstepGroup

LOG_FILE = "sweep.log"


def execute_run(config: Optional[ExperimentConfig], run_dir: Path, *, resume: bool,
                callbacks: Iterable[Callback] = (), log: Callable[[str], None] = lambda message: None,
                resume_sets: Sequence[str] = (), datasets: Optional[DatasetCache] = None,
                lockstep: Optional[LockstepGroup] = None) -> dict[str, Any]:
    """Run ``config`` in ``run_dir`` from the start, or continue the run there (``resume``).

    ``resume_sets``: overrides of keys that keep the results (``run.threads=2``; see
    :func:`fedhet.engine.runner.resume_run`) applied to a resumed run's saved configuration.
    ``datasets``: loaded datasets to reuse across runs of this process (same numbers without it).
    ``lockstep``: the group that trains this run's rounds with others' (:mod:`fedhet.engine.lockstep`)."""
    from fedhet.config import load_config
    from fedhet.engine import CheckpointError, resume_run, run_experiment

    if resume:
        try:
            return resume_run(run_dir, callbacks=callbacks, log=log, sets=resume_sets, datasets=datasets,
                              lockstep=lockstep)
        except CheckpointError as error:
            # Neither checkpoint.pt nor checkpoint.prev.pt is usable (e.g. truncated): a sweep run
            # has its planned configuration in config.toml, so it starts again rather than
            # failing on every re-run of the sweep.
            log(f"{error}; starting this run again from round 0")
            return run_experiment(load_config(run_dir / "config.toml", list(resume_sets)), run_dir, overwrite=True,
                                  callbacks=callbacks, log=log, datasets=datasets, lockstep=lockstep)
    if config is None:
        raise ValueError("a new run needs its configuration")
    return run_experiment(config, run_dir, callbacks=callbacks, log=log, datasets=datasets, lockstep=lockstep)


def report_failure(error: Exception) -> None:
    """On standard error: the one-line message of a user error, or the traceback of a bug."""
    from fedhet.error_lines import error_line, is_user_error

    if is_user_error(error):
        print(error_line(error)[0], file=sys.stderr)    # one line, as the command line prints it
    else:
        traceback.print_exc()                             # a bug: the traceback is what helps


def failure_status(error: Exception) -> int:
    """The exit status for ``error``: 1 the machine, 2 the run's input, 3 a bug. As the command
    line's, except that a refusal for memory or disk (``ResourceLimitError``, ``RayActorsTooManyError``:
    MemoryErrors that are also user errors, exit 2 on the command line) is 1 here: the same run
    succeeds once memory or disk is freed, so `fedhet tune` must not record it as the trial's result."""
    from fedhet.error_lines import EXIT_OS_ERROR, error_line, is_out_of_memory

    if is_out_of_memory(error):
        return EXIT_OS_ERROR
    return error_line(error)[1]


def _log_to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_request(request: dict[str, Any], datasets: DatasetCache) -> int:
    """One request of :func:`serve`: 0 when the run finished, else the command line's status of its
    failure (1 the machine, 2 the run's input, 3 a bug; reported on stderr)."""
    try:
        resume = bool(request.get("resume"))
        config = None if resume else _config_from_toml(request["config"])
        execute_run(config, Path(request["run_dir"]), resume=resume, log=_log_to_stderr, datasets=datasets)
    except Exception as error:  # the run's log gets the reason; the sweep reports the failure
        report_failure(error)
        return failure_status(error)
    return 0


class RequestError(FedhetError, ValueError):
    """A serving worker's request line that is not ``{"run_dir": ..., "resume": bool, "config": TOML}``."""


def _config_from_toml(text: str) -> ExperimentConfig:
    try:
        raw = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as error:
        raise RequestError(f"the run's configuration is not valid TOML ({error})") from None
    return resolve_config(raw)


def parse_request(line: str) -> dict[str, Any]:
    """The request of one line (module docstring), checked: a JSON object whose ``run_dir`` is a
    non-empty path, ``resume`` a boolean, and ``config`` a non-empty TOML text for a new run (an
    empty one would run the all-defaults experiment); :class:`RequestError` otherwise."""
    try:
        request = json.loads(line)
    except (ValueError, RecursionError):
        raise RequestError(f"a request is one JSON object a line; got {line.strip()[:80]!r}") from None
    if not isinstance(request, dict):
        raise RequestError(f"a request is a JSON object, not {type(request).__name__}")
    run_dir, resume, config = request.get("run_dir"), request.get("resume", False), request.get("config")
    if not isinstance(run_dir, str) or not run_dir.strip():
        raise RequestError(f"run_dir = {run_dir!r}: must be a non-empty path")
    if not isinstance(resume, bool):
        raise RequestError(f"resume = {resume!r}: must be true or false")
    if not resume and (not isinstance(config, str) or not config.strip()):
        raise RequestError(f"config = {config!r}: a new run needs its configuration as TOML text")
    return request


class _OutputTo:
    """File descriptors 1 and 2 (and Python's sys.stdout/err) sent to ``path`` (appended) while in
    the block, then back to where they were."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self) -> "_OutputTo":
        sys.stdout.flush()
        sys.stderr.flush()
        self.saved = (os.dup(1), os.dup(2))
        try:
            target = open_log_for_append(self.path)     # never through a planted link (fedhet.core.log_files)
        except BaseException:
            for saved in self.saved:
                os.close(saved)
            raise
        try:
            os.dup2(target, 1)
            os.dup2(target, 2)
        finally:
            os.close(target)
        return self

    def __exit__(self, *exc) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, saved in zip((1, 2), self.saved):
            os.dup2(saved, fd)
            os.close(saved)


def serve(requests, replies, *, datasets: Optional[DatasetCache] = None) -> None:
    """Run the requests read from ``requests`` (lines) one after another, answering each on ``replies``
    (module docstring); ends at the end of ``requests``."""
    datasets = datasets if datasets is not None else DatasetCache()
    for line in requests:
        if not line.strip():
            continue
        try:
            request = parse_request(line)
        except RequestError as error:
            # A malformed request is answered, not fatal: the worker goes on with the next line.
            print(f"fedhet: worker request refused: {error}", file=sys.stderr, flush=True)
            given = _given_run_dir(line)
            replies.write(json.dumps({"run_dir": given, "status": 2}) + "\n")
            replies.flush()
            continue
        run_dir = Path(request["run_dir"])
        run_dir.mkdir(parents=True, exist_ok=True)
        try:
            with _OutputTo(run_dir / LOG_FILE):
                status = run_request(request, datasets)
        except UnsafeLogFileError:
            # The log cannot be written (a planted link or FIFO); the sweep names the reason when
            # it reads the log's end (fedhet.lab.sweep.outcome.tail_of). The run's input: status 2.
            status = 2
        replies.write(json.dumps({"run_dir": str(run_dir), "status": status}) + "\n")
        replies.flush()


def _given_run_dir(line: str) -> str:
    """The ``run_dir`` a malformed request names, when it names one as text (for its reply)."""
    try:
        value = json.loads(line).get("run_dir", "")
    except (ValueError, RecursionError, AttributeError):
        return ""
    return value if isinstance(value, str) else ""


def _serve_main() -> int:
    # The replies go on a private copy of the original standard output; descriptor 1 itself then
    # points to /dev/null between runs and to the run's log during one (_OutputTo), so nothing a run
    # prints can be mistaken for a reply.
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
    serve(sys.stdin, replies)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    serving = "--serve" in args
    args = [arg for arg in args if arg != "--serve"]
    resume = "--resume" in args
    args = [arg for arg in args if arg != "--resume"]
    parent_pid = None
    if "--parent-pid" in args and args.index("--parent-pid") + 1 < len(args):
        at = args.index("--parent-pid")
        parent_pid = int(args[at + 1])
        del args[at:at + 2]
    if len(args) != (0 if serving else 1) or (serving and resume):
        print("usage: python -m fedhet.lab.sweep.worker RUN_DIR [--resume] [--parent-pid PID]  "
              "(new runs: config TOML on stdin)\n"
              "       python -m fedhet.lab.sweep.worker --serve [--parent-pid PID]  "
              "(one JSON request a line on stdin)", file=sys.stderr)
        return 2
    if parent_pid is not None:
        # The sweep's process: this worker ends with it (fedhet.lab.sweep.lifetime).
        watch_parent(parent_pid)
    if serving:
        return _serve_main()
    run_dir = Path(args[0])
    try:
        config = None if resume else _config_from_toml(sys.stdin.read())
        execute_run(config, run_dir, resume=resume, log=_log_to_stderr)
    except Exception as error:  # the run's log gets the reason; the sweep reports the failure
        report_failure(error)
        # The command line's statuses (1: the machine, a full disk or no memory; 2: the run's input;
        # 3: a bug), so that `fedhet tune` can tell a failure of the machine from one of a trial.
        return failure_status(error)
    return 0


if __name__ == "__main__":
    sys.exit(main())
