"""``gpope tune --spec``: re-tuning some epsilons keeps the others only on the same public cohort."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from gpope.config import load_config
from gpope.core.spec import EvaluationSpec
from gpope.shell.pipeline.tune_spec import replace_evaluation_block, tune_spec

REPO = Path(__file__).resolve().parents[2]


def _tune(path: Path, epsilons, patients: int, steps):
    return tune_spec(path, settings=load_config(None).evaluation, patients=patients,
                     max_length=30, epsilons=epsilons, trials=1, clips=(0.01, 0.1), steps=steps,
                     overrides={"passes": 2.0, "iterations": 40}, command=f"tune {epsilons}")


def test_retuning_one_epsilon_keeps_the_others_tuned_on_the_same_cohort(tmp_path):
    path = tmp_path / "chain.yaml"
    shutil.copy(REPO / "conf" / "specs" / "chain.yaml", path)
    path.write_text(replace_evaluation_block(path.read_text(), {}).replace("evaluation: {}\n", ""))
    first = _tune(path, (0.1, 1.0), 60, (1.0, 10.0))
    second = _tune(path, (0.1,), 60, (0.1, 0.3))  # a lower step grid for epsilon 0.1 only
    block = EvaluationSpec.from_mapping(yaml.safe_load(path.read_text())).evaluation
    assert [p.epsilon for p in block.tuned] == [0.1, 1.0]
    eps1 = next(p for p in first.block["tuned"] if p["epsilon"] == 1.0)
    assert (block.tuned[1].clip, block.tuned[1].step_size) == (eps1["clip"], eps1["step_size"])
    assert block.tuned[0].step_size in (0.1, 0.3)  # re-tuned on the new grid
    (kept,) = block.tuning["kept"]
    assert kept["epsilon"] == 1.0 and kept["command"] == "tune (0.1, 1.0)"
    assert kept["step_grid"] == [1.0, 10.0] and block.tuning["step_grid"] == [0.1, 0.3]
    assert second.block["tuning"]["command"] == "tune (0.1,)"
    assert "&id" not in path.read_text()  # each kept grid written out, no YAML aliases
    # a second re-tune of epsilon 0.1: epsilon 1 keeps its FIRST provenance
    _tune(path, (0.1,), 60, (0.03, 0.1))
    block = EvaluationSpec.from_mapping(yaml.safe_load(path.read_text())).evaluation
    assert [(k["epsilon"], k["command"], k["step_grid"]) for k in block.tuning["kept"]] == [
        (1.0, "tune (0.1, 1.0)", [1.0, 10.0])]
    # another public cohort: every point is replaced, nothing kept
    _tune(path, (0.1,), 80, (0.1, 0.3))
    block = EvaluationSpec.from_mapping(yaml.safe_load(path.read_text())).evaluation
    assert [p.epsilon for p in block.tuned] == [0.1] and "kept" not in block.tuning


def test_retuning_keeps_the_interval_settings_and_their_provenance(tmp_path):
    path = tmp_path / "chain.yaml"
    shutil.copy(REPO / "conf" / "specs" / "chain.yaml", path)
    before = EvaluationSpec.from_mapping(yaml.safe_load(path.read_text())).evaluation
    assert before.interval_settings()  # the shipped chain spec sets them
    _tune(path, (1.0,), 60, (1.0, 10.0))
    after = EvaluationSpec.from_mapping(yaml.safe_load(path.read_text())).evaluation
    assert after.interval_settings() == before.interval_settings()
    assert after.intervals_provenance == before.intervals_provenance
    assert after.tuning["command"] == "tune (1.0,)"
