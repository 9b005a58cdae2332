"""Small faults an operator meets (issue 29.6): a damaged Delta log, numbers YAML 1.1 reads as
text, and staging folders of killed writers. Real files, real processes, no Spark."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from gpope.errors import ConfigError, CorruptTableError


def _truncate_last_commit(table: Path) -> Path:
    log = sorted((table / "_delta_log").glob("*.json"))[-1]
    text = log.read_text()
    log.write_text(text[: len(text) // 2])
    return log


def test_a_truncated_delta_log_is_one_line_naming_the_table(tmp_path, capsys):
    from gpope.cli import main
    from gpope.shell.lake.delta_rs.log import open_table

    table = tmp_path / "lake" / "bronze" / "ward" / "observations"
    write_deltalake(table, pa.table({"x": [1]}))
    write_deltalake(table, pa.table({"x": [2]}), mode="append")
    _truncate_last_commit(table)
    with pytest.raises(CorruptTableError, match=f"The Delta table at {table} cannot be read"):
        open_table(str(table))
    assert main(["query", "--lake", str(tmp_path / "lake"), "--operator",
                 "SELECT count(*) FROM ward__observations"]) == 2
    notice, *err = capsys.readouterr().err.strip().splitlines()
    assert notice.startswith("operator mode:")
    assert len(err) == 1 and str(table) in err[0] and "damaged" in err[0]


def test_numbers_in_every_yaml_form_are_numbers_and_text_is_refused_naming_its_type(tmp_path):
    from gpope.config import load_yaml
    from gpope.shell.pipeline.jobargs import load_spec

    spec = Path(__file__).resolve().parents[2] / "conf" / "specs" / "chain.yaml"
    text = spec.read_text()
    assert "reward_bounds: [0.0, 1.0]" in text
    wide = tmp_path / "wide.yaml"
    wide.write_text(text.replace("reward_bounds: [0.0, 1.0]", "reward_bounds: [0, 1.0e308]"))
    assert load_spec(wide).reward_bounds == (0.0, 1.0e308)
    forms = tmp_path / "forms.yaml"
    forms.write_text("a: 1e-5\nb: 2E3\nc: -1.5e+2\nd: '1e5'\ne: 1_000\n")
    assert load_yaml(forms) == {"a": 1e-5, "b": 2000.0, "c": -150.0, "d": "1e5", "e": 1000}
    quoted = tmp_path / "quoted.yaml"
    quoted.write_text(text.replace("reward_bounds: [0.0, 1.0]", "reward_bounds: [0, '1.0e308']"))
    with pytest.raises(ConfigError, match=r"'reward_bounds'.*\(types int, str; write numbers"):
        load_spec(quoted)
    gamma = tmp_path / "gamma.yaml"
    gamma.write_text(text.replace("gamma: 0.99", "gamma: '0.99'", 1))
    with pytest.raises(ConfigError, match=r"'gamma'.*\(a str: write numbers without quotes\)"):
        load_spec(gamma)


_KILLED_WRITER = """
import os, signal, sys
from pathlib import Path
from gpope.shell.lake.delta_rs.files import new_staging
root, token, staging = new_staging(Path(sys.argv[1]), "gold/d/trajectory_stats")
staging.mkdir(parents=True)
(staging / "part-00000.snappy.parquet").write_bytes(b"half a file")
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_staging_of_a_killed_writer_is_removed_by_the_next_write(tmp_path):
    from gpope.shell.lake.delta_rs.files import STAGING_FOLDER, drop_staging, new_staging

    table = tmp_path / "t"
    proc = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(table)], timeout=120)
    assert proc.returncode == -signal.SIGKILL
    (left,) = (table / STAGING_FOLDER).iterdir()  # what the killed writer left
    _, _, live = new_staging(table, "t")  # this (living) process starts a write...
    live.mkdir()
    assert not left.exists()  # ...which removes the dead writer's folder at once
    _, _, rerun = new_staging(table, "t")  # a concurrent writer keeps the living one's
    assert live.exists()
    for staging in (rerun, live):
        drop_staging(staging)
    assert not (table / STAGING_FOLDER).exists()  # no litter once both are done
    assert os.getpid() > 0
