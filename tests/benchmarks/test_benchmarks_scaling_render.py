"""benchmarks/scaling_render.py: the tables of docs/scaling.md are its rendering of the result file that
page cites (block for block), a hand-made result renders as written by hand, and benchmarks/scaling.py
``--tables`` prints the same. Nothing is measured."""
import json
import re

import pytest

from benchmark_loader import BENCHMARKS, load_benchmark

DOC = BENCHMARKS.parent / "docs" / "scaling.md"


@pytest.fixture(scope="module")
def render():
    return load_benchmark("scaling_render")


def _cited_result() -> str:
    [path] = re.findall(r"Tables: `python benchmarks/scaling_render\.py (benchmarks/results/scaling-[\w-]+\.json)`",
                        DOC.read_text())
    return path


def test_docs_tables_are_the_rendering_of_the_cited_result(render):
    tables = render.markdown_tables(json.loads((BENCHMARKS.parent / _cited_result()).read_text()))
    doc = DOC.read_text()
    blocks = [block.strip() for block in tables.split("\n\n") if block.strip()]
    assert len(blocks) == 12                     # six captions, six tables
    missing = [block.splitlines()[0] for block in blocks if block not in doc]
    assert not missing, f"docs/scaling.md differs from scaling_render.py {_cited_result()} in: {missing}"


def _hand_result() -> dict:
    def timed(axis, n, k, method, seconds):
        return {"axis": axis, "N": n, "K": k, "method": method, "seconds_per_round": seconds, "store_bytes": 2e6,
                "dense_server_state_bytes": 3e6, "checkpoint_bytes": 4e6, "checkpoint_seconds": 0.5}

    return {
        "meta": {"date": "2026-01-01T00:00:00+00:00"},
        "K": [timed("K", 1000, 10, "b", 0.002), timed("K", 1000, 10, "a", 0.001)],
        "N": [timed("N", 100, 10, "b", 0.003),
              {"axis": "N", "N": 100, "K": 10, "method": "a", "skipped": True,
               "predicted_dense_server_state_bytes": 3 * 2**30}],
        "stores": {"a": {"client": ["c"], "server": [], "broadcast_vectors": 1}, "b": {"error": "boom"}},
        "assumptions": {"nodes": 2, "gpu_tflops": 1.0, "step_overhead_seconds": 0.001, "lr_grid": 3,
                        "bandwidth_gbit": 8.0},
        "cpu_training_rate": {"achieved_gflops_one_thread": 1.25},
        "presets": [],
    }


def test_a_hand_made_result_renders_as_written_by_hand(render):
    lines = render.markdown_tables(_hand_result()).splitlines()
    # Rows by the axis value (K = 10), methods in the order measured (b before a), milliseconds with one decimal.
    assert lines[2:5] == ["| K | b | a |", "| ---: | ---: | ---: |", "| 10 | 2.0 | 1.0 |"]
    assert "| 100 | 3.0 | not run (3 GiB state) |" in lines
    assert "| 100 | b | 2.0 | 3.0 | 4.0 | 0.500 |" in lines          # a's skipped row has no memory line
    assert not any(line.startswith("| 100 | a |") for line in lines)
    assert "| a | c | - | 1 |" in lines and "| b | (boom) | | |" in lines
    assert any("GFLOP/s per core; 1.00 ms of overhead per local step" in line for line in lines)


def test_plots_are_written_from_the_result(render, tmp_path):
    render.write_plots(_hand_result(), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scaling-K.png", "scaling-N.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in tmp_path.iterdir())


def test_a_result_without_timings_is_refused_in_one_line(render, tmp_path, capsys):
    path = tmp_path / "skip.json"
    result = _hand_result()
    del result["K"], result["N"]
    path.write_text(json.dumps(result))
    assert render.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no timings" in err and "--skip-timing" in err


def test_scaling_tables_option_prints_the_rendering(render, capsys):
    cited = str(BENCHMARKS.parent / _cited_result())
    assert load_benchmark("scaling").main(["--tables", cited]) == 0
    assert capsys.readouterr().out == render.markdown_tables(json.loads(open(cited).read()))
