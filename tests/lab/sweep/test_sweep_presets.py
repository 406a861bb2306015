"""Every preset under configs/papers and configs/cpu loads, and every sweep its header documents plans.

A preset may name a component (a server, solver, dataset, ... name) that is not registered yet; then
the test is skipped naming it, and turns into a real check as soon as the component lands. Any other
configuration error (an unknown option of a registered component, a bad value) fails.
"""
from __future__ import annotations

import itertools
import re
import shlex
from pathlib import Path

import pytest

from fedhet.config.schema import COMPONENT_SECTIONS, load_config
from fedhet.core.options import ConfigError

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = ROOT / "configs"
PRESETS = sorted(p for folder in ("papers", "cpu") for p in (CONFIGS / folder).rglob("*.toml")
                 if not p.name.endswith(".variants.toml"))
VARIANT_FILES = sorted(p for folder in ("papers", "cpu") for p in (CONFIGS / folder).rglob("*.variants.toml"))


def missing_component(error: ConfigError) -> str | None:
    """``"server.name = 'x'"`` when ``error`` is about a component name that is not registered, else None."""
    from fedhet.core.registry import ALGORITHMS

    key, value = error.key, error.value
    if key == "algorithm":
        return None if value in ALGORITHMS else f"algorithm = {value!r}"
    section = key[:-len(".name")] if key.endswith(".name") else None
    if section in COMPONENT_SECTIONS and isinstance(value, str) and value not in COMPONENT_SECTIONS[section][0]:
        return f"{key} = {value!r}"
    return None


def header(path: Path) -> list[str]:
    return list(itertools.takewhile(lambda line: line.startswith("#"), path.read_text().splitlines()))


def sweep_commands(path: Path) -> list[list[str]]:
    commands = []
    for line in header(path):
        match = re.match(r"#\s+fedhet sweep (.*)$", line)
        if match:
            commands.append(shlex.split(match.group(1)))
    return commands


def expand_braces(text: str) -> list[str]:
    match = re.search(r"\{([^{}]*)\}", text)
    if not match:
        return [text]
    return [out for choice in match.group(1).split(",")
            for out in expand_braces(text[:match.start()] + choice + text[match.end():])]


def test_there_are_presets():
    names = {p.name for p in PRESETS}
    for expected in ("fedaware_t2_cifar10.toml", "fedaware_t2_cifar100.toml", "fedaware_t2_agnews.toml",
                     "fedaware_hybrid_t1_cifar10_statistical.toml", "fedaware_hybrid_t1_fmnist_dirichlet.toml",
                     "fedspeed_t1_tinyimagenet_dir06.toml", "fedspeed_t4_cifar10_100clients_iid.toml",
                     "fedspeed_t6_cifar10_dir03.toml", "fedspeed_t7_cifar10.toml", "fedau_t1_cinic10.toml",
                     "fedau_d61_cifar10.toml", "fmnist_compare.toml"):
        assert expected in names


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: str(p.relative_to(CONFIGS)))
def test_preset_loads_and_its_sweeps_plan(path):
    from fedhet.cli import build_parser
    from fedhet.lab.sweep.grid import load_variants, parse_grid, parse_seeds, select_variants
    from fedhet.lab.sweep.plan import plan_sweep

    lines = header(path)
    assert lines and re.search(r"Table|Appendix|counterpart|comparison", " ".join(lines[:3])), \
        f"{path.name} must begin with a comment naming its paper and table"
    # Every file the header points to exists.
    for reference in re.findall(r"configs/[\w/{},.-]+\.toml", "\n".join(lines)):
        for name in expand_braces(reference):
            assert (ROOT / name).is_file(), f"{path.name} names {name}, which does not exist"

    missing: list[str] = []

    def check(action):
        try:
            action()
        except ConfigError as error:
            name = missing_component(error)
            if name is None:
                raise
            missing.append(name)

    check(lambda: load_config(path))
    commands = sweep_commands(path)
    assert commands, f"{path.name} documents no `fedhet sweep` command in its header"
    for argv in commands:
        args = build_parser().parse_args(["sweep", *argv])
        assert (ROOT / args.config).resolve() == path.resolve(), f"the sweep in {path.name} runs {args.config}"
        variants = load_variants(ROOT / args.variants) if args.variants else [None]
        if args.only:
            variants = select_variants(variants, args.only.split(","))
        grids = [parse_grid(text) for text in args.grid or []]
        seeds = parse_seeds(args.seeds) if args.seeds else None
        for variant in variants:      # one at a time, so a missing component leaves the others checked
            check(lambda: plan_sweep(path, grids=grids, seeds=seeds, variants=[variant] if variant else [],
                                     sets=args.set or [], out_dir="unused"))
    if missing:
        pytest.skip("not registered yet: " + ", ".join(sorted(set(missing))))


def test_every_variants_file_is_used_by_a_preset():
    used = {args[args.index("--variants") + 1] for path in PRESETS for args in sweep_commands(path)
            if "--variants" in args}
    for path in VARIANT_FILES:
        assert str(path.relative_to(ROOT)) in used, f"{path.name} is not used by any preset's sweep command"


def test_compare_lists_the_issue_algorithms():
    from fedhet.lab.sweep.grid import load_variants

    compare_dir = CONFIGS / "cpu" / "compare"
    variants = load_variants(compare_dir / "algorithms.variants.toml")
    assert [v.name for v in variants] == ["fedavg", "fedavgm", "fedprox", "scaffold", "feddyn", "fedyogi", "fedaware",
                                          "fedavg_aware", "fedspeed"]
    participation = load_variants(compare_dir / "participation.variants.toml")
    assert [v.name for v in participation] == ["fedavg", "fedau", "average_participating"]
    compare = load_config(compare_dir / "fmnist_compare.toml")
    setting = (compare.data.name, compare.partition.name, compare.partition.options.alpha,
               compare.partition.options.num_clients)
    assert setting == ("fmnist", "dirichlet", 0.1, 100)
    assert (compare.participation.name, compare.participation.options.clients_per_round) == ("uniform", 10)
    heterogeneous = load_config(compare_dir / "fmnist_participation.toml")
    assert (heterogeneous.data.name, heterogeneous.partition.name, heterogeneous.partition.options.alpha,
            heterogeneous.partition.options.num_clients) == setting
    assert heterogeneous.participation.name == "heterogeneous"
    # The two blocks differ only in participation (and the run name).
    assert heterogeneous.client == compare.client and heterogeneous.model == compare.model
    assert heterogeneous.run.rounds == compare.run.rounds


def test_missing_component_is_only_an_unregistered_name():
    assert missing_component(ConfigError("server.name", "fedfuture", "unknown server; allowed: fedavg")) == \
        "server.name = 'fedfuture'"
    assert missing_component(ConfigError("algorithm", "fedfuture", "allowed: fedavg")) == "algorithm = 'fedfuture'"
    assert missing_component(ConfigError("server.name", "fedavg", "whatever")) is None       # registered
    assert missing_component(ConfigError("server.momentum", 2.0, "must be < 1")) is None
    assert missing_component(ConfigError("client.mu_typo", 1, "unknown key")) is None
