"""The policy value release (J(target), J(behaviour), their contrast;
:mod:`gpope.core.policy_value_release`) as an audited release: ``gpope audit --estimator
policy_value`` puts a canary patient at the public maxima (:mod:`gpope.core.audit.policy_value`).
Every estimator's run may make it, from its own share of the run's budget."""

from __future__ import annotations

from typing import Any

from gpope.core.estimators.base import AuditRequest

__all__ = ["AUDIT", "config"]


def AUDIT(request: AuditRequest) -> list[tuple[str, Any]]:
    """The audit of the release at the configuration's policy value settings; ``--quick`` keeps
    its runs (at half of them a factor-2 noise error is no longer provable, docs/AUDIT.md)."""
    from gpope.core.audit.policy_value import run_policy_value_audit

    settings = request.policy_value_settings() if request.policy_value_settings else None
    cfg = config(request)
    variants = [("real", {})] + ([("noise x0.5", {"_noise_scale": 0.5}),
                                  ("noise/10", {"_noise_scale": 0.1})]
                                 if request.include_broken else [])
    return [(name, run_policy_value_audit(cfg, request.seed, settings=settings, **kw))
            for name, kw in variants]


def config(request: AuditRequest) -> Any:
    """The audit's :class:`~gpope.core.audit.policy_value.PolicyValueAuditConfig`: the preset
    with the caller's ``--m``, ``--epsilon``, ``--runs`` (``--quick`` keeps its runs)."""
    from gpope.core.audit.policy_value import PolicyValueAuditConfig

    return PolicyValueAuditConfig(delta=request.delta, **request.canary_overrides())
