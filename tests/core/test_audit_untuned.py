"""The tuning-free default's SSP and residual releases pass their privacy audits; a factor-2
noise error in either, and C's noise drawn without the 1/w of its weight, fail them
(gpope.core.audit.untuned)."""

from __future__ import annotations

import json
import math

import numpy as np
from scipy.optimize import brentq
from scipy.stats import norm

from gpope.core.audit.untuned import UntunedAuditConfig, run_untuned_audit


def _gdp_epsilon(mu: float, delta: float) -> float:
    """epsilon(delta) of the Gaussian mechanism with mu = sensitivity / std (Balle and Wang
    2018, Thm. 8): an oracle independent of the project's accountants."""
    return float(brentq(lambda e: norm.cdf(-e / mu + mu / 2)
                        - math.exp(e) * norm.cdf(-e / mu - mu / 2) - delta, 0.0, 100.0))


def test_default_ssp_audit_passes_and_catches_half_noise_and_unweighted_c_noise():
    # the CLI's preset and seed (gpope audit --estimator untuned --include-broken)
    cfg = UntunedAuditConfig()
    real = run_untuned_audit(cfg, 0)
    half = run_untuned_audit(cfg, 0, _noise_scale=0.5)
    unweighted = run_untuned_audit(cfg, 0, _unweighted_c_noise=True)
    assert real.epsilon_claimed == half.epsilon_claimed == 4.0  # a default run's claim
    assert real.passed and real.epsilon_lower < 4.0
    assert not half.passed and half.epsilon_lower > 4.0
    assert not unweighted.passed and unweighted.epsilon_lower > 4.0
    # the preset is one where half the noise is a real violation: the SSP release alone at
    # the plan's multiplier is within the claim, at half of it about twice the claim
    mu = 1.0 / real.sigma
    assert _gdp_epsilon(mu, cfg.delta) <= 4.0 < 1.5 * 4.0 < _gdp_epsilon(2.0 * mu, cfg.delta)


def test_residual_audit_passes_and_catches_half_noise():
    # the refinement's release against its own certified epsilon (a default run at 10)
    from gpope.core.ssp import ssp_epsilon
    from gpope.core.untuned.release import UntunedSettings, plan_untuned

    cfg = UntunedAuditConfig.preset("residual")
    real = run_untuned_audit(cfg, 0)
    half = run_untuned_audit(cfg, 0, _noise_scale=0.5)
    sigma = plan_untuned(m=cfg.m + 1, epsilon=10.0, delta=cfg.delta,
                         settings=UntunedSettings()).residual
    assert real.sigma == sigma
    assert real.epsilon_claimed == ssp_epsilon(m=cfg.m + 1, sigma=sigma, delta=cfg.delta)
    # the claim is the Gaussian mechanism's exact epsilon (to the accountant's grid), and half
    # the noise doubles mu: a real violation
    assert _gdp_epsilon(1.0 / sigma, cfg.delta) <= real.epsilon_claimed * (1 + 1e-3)
    assert 1.5 * real.epsilon_claimed < _gdp_epsilon(2.0 / sigma, cfg.delta)
    assert real.passed and not half.passed and half.epsilon_lower > real.epsilon_claimed


def test_the_cli_audits_the_default_and_keeps_its_runs_under_quick(capsys):
    from gpope.cli import main

    # the broken variants at this preset and seed are the test above; --quick keeps the runs
    # at which they are detected
    code = main(["audit", "--estimator", "untuned", "--quick", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["real_solver_passed"]
    assert [r["variant"] for r in out["results"]] == ["real", "real"]  # ssp, residual
    assert {r["config"]["release"] for r in out["results"]} == {"ssp", "residual"}
    assert {r["config"]["runs"] for r in out["results"]} == {UntunedAuditConfig().runs}
    assert np.isfinite([r["epsilon_lower"] for r in out["results"]]).all()
