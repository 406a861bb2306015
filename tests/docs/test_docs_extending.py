"""docs/extending.md runs as written: its ```python blocks, in order, in one namespace (a fresh
working directory, so its runs/ land in tmp_path)."""
import re

import fedhet.components  # noqa: F401  (registers every shipped component)
from docs_modules import ROOT
from fedhet.core.registry import ALGORITHMS, CLIENT_SOLVERS, SERVERS

PAGE = ROOT / "docs" / "extending.md"


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_the_extending_page_code_runs_and_its_components_pass_the_checks(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    blocks = _python_blocks(PAGE.read_text(encoding="utf-8"))
    assert len(blocks) >= 5
    namespace: dict = {"__name__": "extending_page"}
    try:
        for block in blocks:
            exec(compile(block, str(PAGE), "exec"), namespace)
        # Running a registration block again (a notebook cell run twice) replaces, not fails.
        exec(compile(blocks[0], str(PAGE), "exec"), namespace)
    finally:
        printed = capsys.readouterr().out
        # Leave the registries as the other tests expect them.
        for registry, name in [(CLIENT_SOLVERS, "local_momentum"), (CLIENT_SOLVERS, "noisy_sgd"),
                               (SERVERS, "trimmed_mean")]:
            registry._entries.pop(name, None)
        ALGORITHMS.pop("robust_momentum", None)
    assert "client 'local_momentum' (with server 'fedavg'): ok   backend parity" in printed
    assert "client 'noisy_sgd' (with server 'fedavg'): ok   kill and resume" in printed
    assert "server 'trimmed_mean' (with client 'local_momentum'): ok   empty rounds" in printed
    assert (tmp_path / "runs" / "extending" / "robust_momentum" / "summary.json").is_file()
    assert "robust_momentum" in printed and "fedavg" in printed
