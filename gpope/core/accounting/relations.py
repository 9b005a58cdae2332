"""A run's guarantee under the other neighbouring relation, from its stored event.

A run is charged under one relation (replace-one for uniform sampling, add/remove-one
otherwise). The exact m tells two add/remove neighbours apart, so an add/remove run publishes m
only as the noisy count m~ (:mod:`gpope.core.mechanisms.count`, charged to the same budget) and
uses m~ wherever m enters a decision or a released number; a replace-one run publishes the exact
m, which both neighbours share. This module restates a stored add/remove event under replace-one
(and a replace-one event under itself) for ``gpope budget show --relation`` and the report's
``--json``.

Replace-one from add/remove:

- **Unsampled Gaussian leaves** (every one-shot release): each ``GaussianDpEvent(s)`` is a query
  of add/remove L2 sensitivity 1 with noise std ``s``; a replacement moves it by at most 2: the
  Gaussian mechanism with ``mu = 2 / s`` (exact; conservative for a histogram, whose
  replace-one sensitivity is sqrt 2). dp-accounting's accountants read ``GaussianDpEvent``
  differently under ``REPLACE_ONE`` (reference/ACCOUNTING.md); the exact Gaussian formula used
  here sidesteps both.
- **Sampled events** (Poisson GPOPE): group privacy: an (eps, delta')-DP add/remove mechanism is
  (2 eps, (1 + e^eps) delta')-DP under replace-one (Dwork and Roth 2014, Theorem 2.2, a group of
  2), delta' solved so the second term equals the run's delta.

The reverse direction is not defined for uniform sampling: its batch size is a function of m.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import dp_accounting

from gpope.errors import AccountingError

__all__ = ["OTHER_RELATION", "epsilon_under", "gaussian_epsilon", "gaussian_mu", "restate",
           "stored_relation"]

#: The relation a run's guarantee is restated under, by the relation it was charged under.
OTHER_RELATION = {"add_or_remove_one": "replace_one", "replace_one": "add_or_remove_one"}


def gaussian_mu(event: dp_accounting.DpEvent) -> float | None:
    """mu of the Gaussian mechanism ``event`` composes to when every leaf is an unsampled
    ``GaussianDpEvent`` (a composition of Gaussian mechanisms is exactly the Gaussian mechanism
    with ``mu^2 = sum_j 1 / s_j^2``, Dong, Roth and Su 2022, Corollary 3.3); None otherwise."""
    if isinstance(event, dp_accounting.GaussianDpEvent):
        s = float(event.noise_multiplier)
        return math.inf if s == 0.0 else 1.0 / s
    if isinstance(event, dp_accounting.NoOpDpEvent):
        return 0.0
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        inner = gaussian_mu(event.event)
        return None if inner is None else inner * math.sqrt(event.count)
    if isinstance(event, dp_accounting.ComposedDpEvent):
        parts = [gaussian_mu(e) for e in event.events]
        return None if any(p is None for p in parts) else math.sqrt(sum(p * p for p in parts))
    return None


def gaussian_epsilon(mu: float, delta: float) -> float:
    """The exact epsilon at ``delta`` of the Gaussian mechanism with sensitivity / std ``mu``:
    the root of ``Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) = delta`` (Balle and Wang
    2018, Theorem 8), by bisection to 1e-12."""
    from scipy.stats import norm

    if mu == 0.0:
        return 0.0
    if not math.isfinite(mu):
        return math.inf

    def excess(eps: float) -> float:
        return float(norm.cdf(-eps / mu + mu / 2.0)
                     - math.exp(eps) * norm.cdf(-eps / mu - mu / 2.0)) - delta

    lo, hi = 0.0, 1.0
    if excess(lo) <= 0.0:
        return 0.0
    while excess(hi) > 0.0:
        hi *= 2.0
    while hi - lo > 1e-12 * max(1.0, hi):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if excess(mid) > 0.0 else (lo, mid)
    return hi


def _rdp_epsilons(event: Any, relation: dp_accounting.NeighboringRelation
                  ) -> Callable[[float], float]:
    """delta -> the RDP epsilon of ``event`` (its RDP curve computed once)."""
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

    from gpope.core.accounting.rdp import RDP_ORDERS

    acc = dp_accounting.rdp.RdpAccountant(orders=list(RDP_ORDERS), neighboring_relation=relation)
    if not acc.supports(event):
        raise AccountingError(f"dp-accounting cannot account for {event!r} under {relation}.")
    acc.compose(event)
    orders, rdp = list(RDP_ORDERS), acc._rdp
    return lambda delta: float(compute_epsilon(orders, rdp, delta)[0])


def epsilon_under(event: dp_accounting.DpEvent, *, charged_relation: str, relation: str,
                  delta: float) -> float | None:
    """The epsilon at ``delta`` of a run whose ``event`` was charged under ``charged_relation``,
    restated under ``relation`` (module docstring; None for add/remove from replace-one): unsampled
    Gaussian leaves by the exact epsilon of the one Gaussian mechanism they compose to, mu doubled
    to replace-one; sampled events by their RDP epsilon, to replace-one by group privacy."""
    ar = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
    named = {"add_or_remove_one": ar, "replace_one": dp_accounting.NeighboringRelation.REPLACE_ONE}
    if charged_relation not in named or relation not in named:
        raise AccountingError(f"Unknown neighbouring relation {charged_relation!r} or "
                              f"{relation!r}; use one of {', '.join(named)}.")
    if relation == "add_or_remove_one" and charged_relation == "replace_one":
        return None
    mu = gaussian_mu(event)
    if mu is not None:  # the stored multipliers are std / sensitivity under the charged relation
        factor = 2.0 if (relation, charged_relation) == ("replace_one", "add_or_remove_one") else 1.0
        return gaussian_epsilon(factor * mu, delta)
    if relation == charged_relation:
        return _rdp_epsilons(event, named[relation])(delta)
    # group of two: (2 eps, (1 + e^eps) delta'); find delta' with (1 + e^eps(delta')) delta'
    # <= delta by halving delta' (eps(delta') falls as delta' grows)
    eps_at = _rdp_epsilons(event, ar)
    inner = delta / 2.0
    while (1.0 + math.exp(min(eps_at(inner), 700.0))) * inner > delta:
        inner /= 1.25
    return 2.0 * eps_at(inner)


def stored_relation(mechanism: str) -> str | None:
    """The neighbouring relation a ledger row's stored mechanism is charged under (None: no
    stored event, or one whose charge holds under every relation, the released count)."""
    from gpope.core.accounting.composition import mechanism_from_json

    stored = mechanism_from_json(mechanism)
    return None if stored is None or stored.every_relation else stored.relation


def restate(mechanism: str, *, relation: str, delta: float) -> float | None:
    """The epsilon at ``delta`` of a ledger row's stored mechanism restated under ``relation``
    (:func:`epsilon_under`); None without a stored event or where it is not defined."""
    from gpope.core.accounting.composition import mechanism_from_json

    stored = mechanism_from_json(mechanism)
    if stored is None:
        return None
    return epsilon_under(stored.event, charged_relation=stored.relation, relation=relation,
                         delta=delta)
