"""The policy value release passes its privacy audit and a factor-2 noise error fails it."""

from __future__ import annotations

from gpope.core.audit_policy_value import PolicyValueAuditConfig, run_policy_value_audit


def test_policy_value_audit_passes_and_catches_half_noise():
    cfg = PolicyValueAuditConfig(epsilon=16.0, runs=100_000)
    real = run_policy_value_audit(cfg, 4)
    broken = run_policy_value_audit(cfg, 4, _noise_scale=0.5)
    assert real.epsilon_claimed == broken.epsilon_claimed == 0.3 * 16.0  # the release's share
    assert real.passed and real.epsilon_lower < real.epsilon_claimed
    assert not broken.passed and broken.epsilon_lower > broken.epsilon_claimed
