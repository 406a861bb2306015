"""docs/quickstart.md's Python snippet runs as written, after the page's own `fedhet init` and
`fedhet run` (so runs/ already holds a run, as it does for a reader), and again (a rerun cell)."""
import re

from docs_modules import ROOT
from fedhet.cli import main

PAGE = ROOT / "docs" / "quickstart.md"


def test_the_quickstart_python_snippet_runs_after_the_cli_steps(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["init"]) == 0
    assert main(["run", "synthetic_quickstart.toml", "--set", "run.rounds=2", "--quiet"]) == 0
    [snippet] = re.findall(r"^```python\n(.*?)^```", PAGE.read_text(encoding="utf-8"), flags=re.S | re.M)
    for _ in range(2):
        namespace: dict = {}
        exec(compile(snippet, str(PAGE), "exec"), namespace)
    result, table = namespace["result"], namespace["table"]
    assert result.run_dir == tmp_path / "runs" / "from_python" or result.run_dir.name == "from_python"
    assert [r["round"] for r in result.history][-1] == 10 and result["rounds"] == 10
    rows = table.to_dict("records") if hasattr(table, "to_dict") else table
    assert {row["run"] for row in rows} == {"synthetic_quickstart", "from_python"}
    assert str(result["final_accuracy"]) in capsys.readouterr().out
