"""Which files a fresh run removes from a run directory: fedhet's own, nothing else."""
from fedhet.engine.rundir import OWN_FILES, clear_run_directory, is_own_temporary


def test_clear_removes_own_files_stores_and_temporaries_only(tmp_path):
    for name in OWN_FILES:
        (tmp_path / name).write_text("old")
    (tmp_path / "stores").mkdir()
    own_stores = ["store-client-c.bin", "store-client-c.snapshot-000003.bin", ".store-x.snapshot-000001.bin.tmp"]
    for name in own_stores:
        (tmp_path / "stores" / name).write_text("old")
    temporaries = [".checkpoint.pt.a1b2c3d4.tmp", ".summary.json.zz_9.tmp"]
    for name in temporaries:
        (tmp_path / name).write_text("old")
    kept = ["notes.txt", "stores/README", ".notes.txt.a1b2c3d4.tmp", "sweep.log", "sweep_run.json", "config.toml.bak"]
    for name in kept:
        (tmp_path / name).write_text("mine")
    clear_run_directory(tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()) == sorted(kept)
    clear_run_directory(tmp_path, sweep_files=True)
    assert not (tmp_path / "sweep.log").exists() and (tmp_path / "notes.txt").exists()


def test_own_temporaries_are_recognised_by_their_target():
    assert is_own_temporary(".metrics.jsonl.k2j4h1_x.tmp")
    assert not is_own_temporary(".metrics.jsonl.tmp")
    assert not is_own_temporary(".thesis.tex.k2j4h1_x.tmp")
