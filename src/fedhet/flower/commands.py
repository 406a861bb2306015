"""``fedhet flower {app,compare,loopback}`` (wired into :mod:`fedhet.cli`; docs/flower.md).

- ``app CONFIG --out DIR``: write the Flower app directory for ``flwr run DIR <connection>``;
- ``compare CONFIG RESULT_DIR``: run the config as ``fedhet run`` does and print the largest parameter
  difference against the deployment's ``RESULT_DIR/params.pt``;
- ``loopback CONFIG``: a SuperLink and SuperNodes on 127.0.0.1, the app, and the comparison, in one go.
"""
from __future__ import annotations

import argparse
import contextlib
import signal
import tempfile
from pathlib import Path
from typing import Any, Iterator

import torch

from fedhet.errors import FedhetError


def _settings(args: argparse.Namespace, config: Any, result_dir: str):
    from fedhet.flower.build import check_deployable, config_text
    from fedhet.flower.settings import AppSettings

    check_deployable(config)
    return AppSettings(config_text=config_text(config), participation=args.participation,
                       round_timeout=args.round_timeout, min_nodes=args.min_nodes,
                       connect_timeout=args.connect_timeout, result_dir=result_dir)


def _load(args: argparse.Namespace) -> Any:
    from fedhet.config import load_config

    return load_config(args.config, args.set or [])


def app_command(args: argparse.Namespace) -> int:
    from fedhet.flower.build import require_flower
    from fedhet.flower.settings import write_app

    require_flower()
    config = _load(args)
    result_dir = str(Path(args.result_dir).resolve()) if args.result_dir else ""
    directory = write_app(args.out, _settings(args, config, result_dir))
    print(f"wrote {directory / 'pyproject.toml'}; run it with: flwr run {directory} <superlink-connection>")
    return 0


def simulate(config: Any, run_dir: Path) -> torch.Tensor:
    """The final model of ``fedhet run`` on ``config`` (run in ``run_dir``; its last checkpoint)."""
    from dataclasses import replace

    from fedhet.engine import checkpoint as ckpt, run_experiment

    config = replace(config, run=replace(config.run, progress=False))
    run_experiment(config, run_dir, overwrite=True)
    return ckpt.load_checkpoint(run_dir)["simulator"]["params"].detach().cpu()


def parameter_difference(deployed: torch.Tensor, simulated: torch.Tensor) -> float:
    if deployed.shape != simulated.shape:
        from fedhet.errors import FedhetError
        raise FedhetError(f"the deployment's model has {deployed.numel()} parameters, the simulation's "
                          f"{simulated.numel()}: not the same config")
    return float((deployed.to(torch.float64) - simulated.to(torch.float64)).abs().max())


class FlowerResultError(FedhetError, RuntimeError):
    """The deployment left no usable result: the ServerApp failed, or the file is not fedhet's."""


def _last_error_line(log: Path) -> str:
    """The last line of ``log`` that names an error (Flower prints the ServerApp's traceback there)."""
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        if "Error" in line or "error" in line:
            return line.strip()[:300]
    return ""


def load_deployed_params(result_dir: Path, log: Path | None = None) -> torch.Tensor:
    """The ServerApp's ``params.pt``; when it is missing, the ServerApp's own error (``error.txt``, else
    the last error line of the ``flwr run`` log) instead of "no such file"; a file that is not a
    tensor is refused in one line."""
    import pickle

    from fedhet.flower.server_app import ERROR_FILE

    path = result_dir / "params.pt"
    if not path.is_file():
        error_file = result_dir / ERROR_FILE
        if error_file.is_file():
            reason = error_file.read_text(encoding="utf-8", errors="replace").strip()
        else:
            reason = _last_error_line(log) if log is not None else ""
        raise FlowerResultError(f"the Flower ServerApp wrote no model to {path}: "
                            + (reason or "it did not finish (see the flwr run output)")
                            + (f"; logs in {log.parent}" if log is not None else ""))
    try:
        deployed = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as error:
        raise FlowerResultError(f"{path}: not a model written by fedhet's ServerApp (it cannot be read as tensors: "
                            f"{str(error).splitlines()[0][:120]})") from None
    if not isinstance(deployed, torch.Tensor):
        raise FlowerResultError(f"{path}: holds a {type(deployed).__name__}, not the model tensor fedhet's ServerApp writes")
    return deployed


def _warn_if_nobody_arrived(result_dir: Path, round_timeout: float) -> None:
    """A deployment in which no client's reply ever arrived is a valid run of nothing: say so."""
    import sys

    try:
        log = torch.load(result_dir / "participation.pt", map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001  (a missing log only skips the warning)
        return
    if isinstance(log, torch.Tensor) and log.numel() and not bool(log.any()):
        print(f"fedhet: warning: no client's reply arrived in any round; the model is the initial one "
              f"(round-timeout = {round_timeout:g} s may be shorter than a round)", file=sys.stderr)


def compare_command(args: argparse.Namespace) -> int:
    config = _load(args)
    result = Path(args.result_dir)
    deployed = load_deployed_params(result)
    simulated = simulate(config, Path(args.sim_dir) if args.sim_dir else result / "simulation")
    difference = parameter_difference(deployed, simulated)
    print(f"bitwise equal: {'yes' if torch.equal(deployed, simulated) else 'no'}")
    print(f"max parameter difference: {difference:.6g}")
    return 0


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt for the block, as SIGINT does, so that leaving the block stops
    the federation it started (otherwise SIGTERM would leave the SuperLink, SuperNodes and apps running)."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:          # not the main thread: signals cannot be handled here
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def loopback_command(args: argparse.Namespace) -> int:
    from fedhet.flower.build import require_flower
    from fedhet.flower.deploy import start_loopback
    from fedhet.flower.settings import write_app

    require_flower()
    config = _load(args)
    if args.min_nodes is None:
        args.min_nodes = args.nodes
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="fedhet-flower-"))
    result_dir = (workdir / "result").resolve()
    settings = _settings(args, config, str(result_dir))
    app_dir = write_app(workdir / "app", settings)
    nodes = [f"partition-id={i} num-partitions={args.nodes}" for i in range(args.nodes)]
    with _sigterm_as_interrupt(), start_loopback(workdir, nodes) as federation:
        print(f"SuperLink on 127.0.0.1:{federation.port} (pid {federation.superlink.pid}); SuperNodes pids "
              f"{', '.join(str(p.pid) for p in federation.supernodes)}; logs in {workdir}", flush=True)
        federation.run_app(app_dir, timeout=args.timeout)
    deployed = load_deployed_params(result_dir, workdir / "flwr-run.log")
    _warn_if_nobody_arrived(result_dir, args.round_timeout)
    simulated = simulate(config, workdir / "simulation")
    print(f"bitwise equal: {'yes' if torch.equal(deployed, simulated) else 'no'}")
    print(f"max parameter difference: {parameter_difference(deployed, simulated):.6g}")
    return 0


def _app_options(parser: argparse.ArgumentParser, min_nodes: Any = 1) -> None:
    parser.add_argument("config", help="fedhet TOML config")
    parser.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help="override a config value")
    parser.add_argument("--participation", choices=("fedhet", "nodes"), default="fedhet",
                        help="fedhet: the config's participation process samples each round's clients; nodes: "
                             "every client of every connected SuperNode trains every round")
    parser.add_argument("--round-timeout", type=float, default=120.0, metavar="S",
                        help="seconds to wait for a round's replies; missing ones are failures (default 120)")
    parser.add_argument("--min-nodes", type=int, default=min_nodes, metavar="N",
                        help=f"SuperNodes to wait for before round 1 (default {min_nodes or 'all of --nodes'})")
    parser.add_argument("--connect-timeout", type=float, default=60.0, metavar="S",
                        help="seconds to wait for --min-nodes SuperNodes (default 60)")


def add_flower_command(sub) -> None:
    """Add ``flower {app,compare,loopback}`` to the ``fedhet`` sub-command parsers ``sub``."""
    flower = sub.add_parser("flower", help="fedhet methods as Flower apps (docs/flower.md)",
                            description="Run fedhet's server methods and local solvers in a Flower deployment.")
    commands = flower.add_subparsers(dest="flower_command", required=True)
    app = commands.add_parser("app", help="write a Flower app directory for a fedhet config")
    _app_options(app)
    app.add_argument("--out", required=True, metavar="DIR", help="app directory to write (its pyproject.toml)")
    app.add_argument("--result-dir", metavar="DIR",
                     help="where the ServerApp writes params.pt, metrics.jsonl and summary.json (default: nowhere)")
    app.set_defaults(handler=app_command)
    compare = commands.add_parser("compare", help="max parameter difference of a deployment against fedhet run")
    compare.add_argument("config", help="fedhet TOML config (the deployment's)")
    compare.add_argument("result_dir", metavar="RESULT_DIR", help="the deployment's result-dir (params.pt)")
    compare.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help="override a config value")
    compare.add_argument("--sim-dir", metavar="DIR", help="run directory of the simulation (default RESULT_DIR/simulation)")
    compare.set_defaults(handler=compare_command)
    loopback = commands.add_parser("loopback", help="a SuperLink and SuperNodes on 127.0.0.1 run CONFIG; "
                                                    "prints the difference against fedhet run")
    _app_options(loopback, min_nodes=None)
    loopback.add_argument("--nodes", type=int, default=2, metavar="M", help="SuperNodes (default 2)")
    loopback.add_argument("--workdir", metavar="DIR", help="logs, app and results (default: a new temporary directory)")
    loopback.add_argument("--timeout", type=float, default=300.0, metavar="S", help="limit of the Flower run (default 300)")
    loopback.set_defaults(handler=loopback_command)

