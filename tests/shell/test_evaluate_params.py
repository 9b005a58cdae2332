"""The settings a run records (MLflow params, ``--json``'s ``settings``) are the ones its
estimator used: an ssp or tuning-free run never lists GPOPE's solver settings."""

from __future__ import annotations

import dataclasses

import pytest

from gpope.config import load_config
from gpope.core.estimators import SOLVER_SETTINGS, get


def run_params(s, *, batch_rate, path, ssp):
    return get(s.estimator).params(s, batch_rate=batch_rate, path=path, statistics=ssp)


def settings_summary(s, provenance, *, accountant):
    return get(s.estimator).summary(s, provenance, accountant=accountant)

SOLVER_ONLY = {"passes", "iterations", "clip", "step_size", "step_schedule", "step_offset",
               "averaging", "tail_fraction", "sampling", "trace_every", "batch_rate",
               "batch_size", "touched_trajectories", "interval_groups", "statistics_share"}
SSP = {"statistics_sigma": 1.5, "ssp_clip": 2.0, "statistics_epsilon": 1.0,
       "statistics_delta": 1e-6, "moments_share": 0.2}
PROVENANCE = {"source": {"clip": "conf", "step_size": "conf", "passes": "conf",
                         "epsilon": "options", "accountant": "conf", "untuned": "conf"},
              "tuned_point": None, "tuning": None, "spec_has_evaluation_block": False,
              "touched_trajectories": 2e4, "interval_note": None}


def _settings(estimator: str):
    return dataclasses.replace(load_config(None).evaluation, estimator=estimator, epsilon=1.0,
                               delta=1e-6)


def test_the_solver_list_names_every_solver_only_setting():
    assert SOLVER_ONLY <= set(SOLVER_SETTINGS)


@pytest.mark.parametrize("estimator", ["ssp", "untuned"])
def test_a_run_without_the_solver_records_none_of_its_settings(estimator):
    s = _settings(estimator)
    params = run_params(s, batch_rate=0.05, path="memory", ssp=SSP)
    assert not SOLVER_ONLY & set(params), params
    assert params["epsilon"] == 1.0 and params["moments_share"] == 0.2
    assert params["policy_value_share"] == s.policy_value_share
    shown = settings_summary(s, PROVENANCE, accountant="pld")
    assert not SOLVER_ONLY & set(shown) and not SOLVER_ONLY & set(shown["source"]), shown
    assert shown["moments_share"] == s.moments_share and shown["accountant"] == "pld"
    if estimator == "untuned":  # the default's own rules, not the ssp clip quantile it ignores
        assert params["untuned.clip_quantile"] == s.untuned.clip_quantile
        assert params["untuned.quantile_share"] == s.untuned.quantile_share
        assert "ssp_clip_quantile" not in params and "ssp_clip_quantile" not in shown
        assert shown["untuned"]["residual_quantile"] == s.untuned.residual_quantile
        assert shown["origin"].startswith("conf evaluation.untuned")
    else:
        assert params["ssp_clip_quantile"] == s.ssp_clip_quantile
        assert not any(k.startswith("untuned.") for k in params) and "untuned" not in shown


def test_a_gpope_run_records_its_solver_settings():
    s = _settings("gpope")
    params = run_params(s, batch_rate=0.05, path="memory", ssp=SSP)
    assert {"passes", "iterations", "clip", "step_size", "sampling"} <= set(params)
    assert params["clip"] == s.clip and params["batch_rate"] == 0.05
    assert params["statistics_share"] == s.statistics_share
    assert run_params(s, batch_rate=None, path="stream", ssp=None)["statistics_share"] == 0.0
    shown = settings_summary(s, PROVENANCE, accountant="pld")
    assert shown["step_size"] == s.step_size and shown["source"]["clip"] == "conf"
    assert shown["touched_trajectories"] == 2e4
