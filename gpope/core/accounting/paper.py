"""The paper's moments bound (Xie, Thomas, Miklau, Lemma 1 + Theorem 2 of Abadi et al.).

FOR REPRODUCING THE PAPER ONLY: this is NOT a valid upper bound on the privacy loss.

Lemma 1 bounds the log-moment of one step (one trajectory drawn uniformly out of ``m``) by

    alpha_1(lambda) <= lambda (lambda + 1) / (2 m^2) * min{4 (e^{1/sigma^2} - 1), 2 e^{1/sigma^2}},

composition sums it over ``N`` steps, ``alpha(lambda) = N alpha_1(lambda) = K lambda (lambda + 1)``,
and the tail bound gives ``delta = min_lambda exp(alpha(lambda) - lambda epsilon)``. The paper
minimises over real ``lambda > 0`` (it stresses that, unlike Abadi et al., no discrete list of
moments is needed), so for a given ``delta``

    epsilon = min_{lambda > 0} (alpha(lambda) + log(1/delta)) / lambda = K + 2 sqrt(K log(1/delta)),

attained at ``lambda* = sqrt(log(1/delta) / K)``. Used literally as written (no restriction on
``lambda``). The derivation drops the higher-order terms of the subsampling expansion "since
m >> 1", which fails at the ``lambda`` the minimiser picks, and treats the replace-one sensitivity
as ``h`` instead of ``2h``: the result can be far below what a rigorous accountant certifies
(reference/ACCOUNTING.md, second table).
"""

from __future__ import annotations

import math
from typing import Any

from gpope.core.accounting.registry import Certificate, RunShape
from gpope.errors import AccountingError

__all__ = ["ACCOUNTANT", "PaperAccountant", "paper_epsilon", "paper_sigma", "paper_step_factor"]


def paper_step_factor(sigma: float) -> float:
    """``min{4 (e^{1/sigma^2} - 1), 2 e^{1/sigma^2}}`` of Lemma 1 (increasing in ``1/sigma^2``)."""
    x = 1.0 / (sigma * sigma)
    if x > 700.0:  # e^x overflows; the min is then 2 e^x, infinite in float
        return math.inf
    return min(4.0 * math.expm1(x), 2.0 * math.exp(x))


def paper_epsilon(*, m: int, iterations: int, sigma: float, delta: float) -> float:
    """Epsilon of the paper's literal bound (inputs already validated; not a valid bound)."""
    k = iterations * paper_step_factor(sigma) / (2.0 * m * m)
    if math.isinf(k):
        return math.inf
    return k + 2.0 * math.sqrt(k * math.log(1.0 / delta))


def paper_sigma(*, m: int, iterations: int, epsilon: float, delta: float) -> float:
    """Smallest sigma whose literal paper epsilon is ``<= epsilon`` (closed form, then checked).

    Inverts ``epsilon = K + 2 sqrt(K L)``: ``sqrt(K) = sqrt(L + epsilon) - sqrt(L)``, then
    ``min{4(e^x - 1), 2 e^x} = 2 m^2 K / N`` for ``x = 1/sigma^2`` (the branch switches at
    ``x = log 2`` where both equal 4). The result is nudged up until the formula certifies it.
    """
    log_inv_delta = math.log(1.0 / delta)
    # sqrt(L + eps) - sqrt(L), written without cancellation.
    root_k = epsilon / (math.sqrt(log_inv_delta + epsilon) + math.sqrt(log_inv_delta))
    factor = 2.0 * m * m * root_k * root_k / iterations
    x = math.log1p(factor / 4.0) if factor <= 4.0 else math.log(factor / 2.0)
    sigma = 1.0 / math.sqrt(x)
    while paper_epsilon(m=m, iterations=iterations, sigma=sigma, delta=delta) > epsilon:
        sigma = math.nextafter(sigma, math.inf) * (1.0 + 1e-12)
    return sigma


class PaperAccountant:
    """:class:`gpope.core.accounting.registry.PrivacyAccountant` of the paper's literal formula
    (uniform sampling; NOT a valid bound)."""

    def epsilon(self, run: RunShape, sigma: float) -> float:
        return paper_epsilon(m=run.m, iterations=run.iterations, sigma=sigma, delta=run.delta)

    def certify(self, run: RunShape, sigma: float) -> Certificate:
        return Certificate(self.epsilon(run, sigma), "paper")

    def calibrate(self, run: RunShape, epsilon: float) -> float:
        """Exact up to rounding (closed form, :func:`paper_sigma`)."""
        return paper_sigma(m=run.m, iterations=run.iterations, epsilon=epsilon, delta=run.delta)

    def event_epsilon(self, event: Any, delta: float, relation: Any) -> float:
        raise AccountingError(
            "The 'paper' accountant bounds one GPOPE run only and composes no other release; use "
            "a rigorous accountant (auto, rdp or pld).")


ACCOUNTANT = PaperAccountant()
