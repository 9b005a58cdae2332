"""`gpope audit --pipeline` (issue 12, defect 5): the real release path, end to end, on a real
local Spark and a temporary lake; the unclipped solver is detected, the real one passes."""

from __future__ import annotations

import pytest

from gpope.shell.pipeline.audit import PipelineAuditConfig, run_pipeline_audit

pytestmark = pytest.mark.spark


def test_pipeline_audit_reproduces_the_release_and_detects_a_missing_clip(spark, tmp_path):
    cfg = PipelineAuditConfig(runs=4000, seed=1)
    results = dict(run_pipeline_audit(spark, cfg, variants={"real": None,
                                                            "no-clip": {"clip": False}},
                                      root=tmp_path))
    # run_pipeline_audit raises AuditError unless its releases reproduce run_evaluate's release
    # exactly, so reaching here means the audited path IS run_evaluate's.
    real, broken = results["real"], results["no-clip"]
    assert real.passed and real.n_test == 2000 and real.override is None
    assert real.sigma > 0 and real.accountant == "rdp"  # uniform sampling, replace-one
    assert not broken.passed and broken.epsilon_lower > cfg.epsilon
    # the datasets went through the lake: stats tables, ledger and release of both worlds
    for dataset in ("audit_d0", "audit_d1"):
        assert (tmp_path / "lake" / "gold" / dataset / "trajectory_stats").exists()
    assert (tmp_path / "lake" / "gold" / "released_estimates").exists()
