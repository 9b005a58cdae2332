"""``--json``'s provenance (``settings.source``) names where every setting the resolver applies
came from, the nested settings blocks (``policy_value``, ``private_tuning``, ``untuned``)
included."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from gpope.config import GpopeConfig, from_mapping, load_yaml
from gpope.core.evaluation.settings import (
    NESTED_BLOCKS,
    RunSettings,
    SettingsLayer,
    resolve_settings,
)
from gpope.core.spec import EvaluationSpec

SPEC_FILE = Path(__file__).resolve().parents[2] / "conf" / "specs" / "chain.yaml"


def test_every_setting_and_every_nested_block_has_a_source():
    blocks = {f.name for f in dataclasses.fields(RunSettings)
              if dataclasses.is_dataclass(getattr(RunSettings(), f.name))}
    assert set(NESTED_BLOCKS) == blocks == {"policy_value", "private_tuning", "untuned",
                                             "behaviour"}
    conf = from_mapping(GpopeConfig, {"evaluation": {
        "untuned": {"clip_quantile": 0.8}, "private_tuning": {"score_z": 1.5}}}).evaluation
    data = load_yaml(SPEC_FILE)
    with_block = EvaluationSpec.from_mapping(data)
    without = EvaluationSpec.from_mapping({k: v for k, v in data.items() if k != "evaluation"})
    flags = SettingsLayer.of(epsilon=1.0, delta=1e-7, clip=0.7)
    for spec, solver in ((with_block, "spec"), (without, "conf")):
        run, info = resolve_settings(conf, spec, flags, m=5000)
        source = info["source"]
        assert set(source) >= {f.name for f in dataclasses.fields(RunSettings)}
        assert {source[k] for k in NESTED_BLOCKS} == {"conf"}
        assert source["clip"] == "options" and source["step_size"] == solver
        # the blocks the resolver applies are the configuration's
        assert run.untuned.clip_quantile == 0.8 and run.private_tuning.score_z == 1.5
