"""Composing the runs of a dataset: stored mechanisms and a Rényi privacy filter.

A run's mechanism is stored in the ledger as a dp-accounting event plus the neighbouring relation
it is analysed under (:func:`mechanism_to_json` / :func:`mechanism_from_json`). The ledger then
composes all runs of a dataset tightly with RDP instead of adding their epsilons.

Why this is valid when runs are chosen adaptively
-------------------------------------------------
Analysts choose the next run (its epsilon, iterations, spec...) after seeing earlier releases, so
the privacy parameters of the composed mechanisms are themselves adaptive. Classical composition
theorems fix the parameters in advance; privacy *filters* (Rogers, Roth, Ullman, Vadhan 2016) do
not. The ledger is a filter: it admits a run only if the composition of everything admitted so far
stays within the budget, and halts the dataset otherwise.

Theorem (Feldman and Zrnic 2021, "Individual Privacy Accounting via a Rényi Filter", Thm. 3.1,
fully adaptive RDP composition). Fix an order ``alpha > 1`` and ``B > 0``. Let mechanisms
``M_1, M_2, ...`` be chosen adaptively, ``M_t`` being ``(alpha, rho_t)``-RDP where ``rho_t`` may
depend on the outputs of ``M_1..M_{t-1}``. If the sequence is stopped so that
``sum_t rho_t <= B`` holds almost surely, the whole interaction is ``(alpha, B)``-RDP.

Several orders (the union step, stated and proved here). Fix in advance a finite set ``L`` of
orders and a budget ``(epsilon_B, delta_B)``. For each ``alpha`` let ``B_alpha`` be the largest RDP
value whose conversion to approximate DP at ``delta_B / |L|`` is at most ``epsilon_B`` (any valid
RDP -> DP conversion; we use dp-accounting's, Canonne, Kamath, Steinke 2020). The ledger admits
a run iff after it ``sum_t rho_t(alpha) <= B_alpha`` for *some* ``alpha`` in ``L``. Then the
interaction is ``(epsilon_B, delta_B)``-DP. Proof: fix neighbouring datasets and outputs' laws
``P, Q``. Each final transcript satisfies the condition for at least one order; assign it to the
first such order in a fixed list (a function of the transcript, since the ``rho_t`` are). The
process stopped at ``min(T, tau_alpha)`` (``tau_alpha`` the stopping time of the single-order
filter at ``alpha``) is ``(alpha, B_alpha)``-RDP by the theorem, and on the transcripts assigned
to ``alpha`` it coincides with the ledger's process. Hence for any event ``S``,
``P(S) - e^eps Q(S) = sum_alpha [P(S_alpha) - e^eps Q(S_alpha)] <= |L| * delta_B / |L|``.

A single run needs no composition: when the first run alone does not fit the filter it is still
admitted on its own certificate (its accountant's (epsilon, delta) within the budget). That
decision depends only on public parameters fixed before any output, so it is a deterministic case
split: either the filter holds from the first run on, or the dataset holds exactly that one run.

The union step needs the orders ``L`` fixed before any run (:data:`FILTER_ORDERS`) and the
``rho_t`` computable from public parameters (the stored events). It does not cover runs under
different neighbouring relations: adding the two relations' filter epsilons is an adaptive split
of one budget between two interleaved filters, which neither theorem states, and by group
privacy an add/remove (eps, delta) run is only (2 eps, (1 + e^eps) delta) under replace-one. The
ledger therefore refuses a run whose relation differs from the dataset's counted runs
(:func:`gpope.core.accounting.admission.check_one_relation`): one sampling scheme per dataset.
"""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import attr
import dp_accounting
import numpy as np
from dp_accounting import dp_event as _dp_event
from dp_accounting.rdp import RdpAccountant
from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

from gpope.errors import AccountingError

__all__ = ["FILTER_ORDERS", "MECHANISM_FORMAT", "RELATIONS", "StoredMechanism", "filter_epsilon",
           "mechanism_from_json", "mechanism_to_json", "rdp_curve", "relation_of_sampling"]

#: Format tag of the ledger's ``mechanism`` JSON.
MECHANISM_FORMAT = "dp_accounting/1"

#: Neighbouring relations by their stored name.
RELATIONS: dict[str, dp_accounting.NeighboringRelation] = {
    "add_or_remove_one": dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
    "replace_one": dp_accounting.NeighboringRelation.REPLACE_ONE,
}

#: The fixed, public set of orders of the ledger's Rényi filter. Fewer orders cost less in the
#: union step (log |L| in the conversion); these cover the optima of 1 to 1000 runs of the
#: mechanisms gpope releases.
FILTER_ORDERS: tuple[float, ...] = (
    1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0, 20.0, 24.0, 32.0,
    48.0, 64.0, 96.0, 128.0, 256.0)

_EVENTS: dict[str, type] = {
    name: getattr(_dp_event, name)
    for name in dir(_dp_event)
    if name.endswith("DpEvent") and isinstance(getattr(_dp_event, name), type)
}


def relation_of_sampling(sampling: str) -> str:
    """The stored relation name matching a GPOPE sampling scheme."""
    return "replace_one" if sampling == "uniform" else "add_or_remove_one"


def _to_plain(value: Any) -> Any:
    if isinstance(value, _dp_event.DpEvent):
        out: dict[str, Any] = {"type": type(value).__name__}
        for f in attr.fields(type(value)):
            out[f.name] = _to_plain(getattr(value, f.name))
        return out
    if isinstance(value, list | tuple):
        return [_to_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _from_plain(value: Any) -> Any:
    if isinstance(value, dict) and "type" in value:
        cls = _EVENTS.get(value["type"])
        if cls is None:
            raise AccountingError(f"Unknown dp-accounting event type {value['type']!r} in a stored mechanism.")
        kwargs = {k: _from_plain(v) for k, v in value.items() if k != "type"}
        return cls(**kwargs)
    if isinstance(value, list):
        return [_from_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class StoredMechanism:
    """A run's mechanism as the ledger stores it. ``every_relation``: its cost under
    ``relation`` bounds its cost under every relation (the released count: sensitivity 1 under
    add/remove-one, 0 under replace-one), so it composes with runs of either."""

    event: dp_accounting.DpEvent
    relation: str
    label: str = ""
    every_relation: bool = False


def mechanism_to_json(event: dp_accounting.DpEvent, relation: str, label: str = "", *,
                      every_relation: bool = False) -> str:
    """The ledger's ``mechanism`` text: JSON with the event tree and its neighbouring relation
    (and ``every_relation``, :class:`StoredMechanism`, when set)."""
    if relation not in RELATIONS:
        raise AccountingError(
            f"Unknown neighbouring relation {relation!r}; use one of {', '.join(RELATIONS)}."
        )
    payload = {"format": MECHANISM_FORMAT, "relation": relation, "label": label,
               "event": _to_plain(event)}
    if every_relation:
        payload["every_relation"] = True
    return json.dumps(payload, sort_keys=True)


_LEGACY_RELATION = {"SampledWithoutReplacementDpEvent": "replace_one"}


def _legacy_event(text: str) -> dp_accounting.DpEvent | None:
    """Parse the ``repr`` of an event (ledger rows written before the JSON format), safely."""
    start = min((text.find(n + "(") for n in _EVENTS if n + "(" in text), default=-1)
    if start < 0:
        return None
    try:
        tree = ast.parse(text[start:].strip(), mode="eval").body
    except SyntaxError:
        return None

    def build(node: ast.AST) -> Any:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _EVENTS:
            args = [build(a) for a in node.args]
            kwargs = {k.arg: build(k.value) for k in node.keywords if k.arg}
            return _EVENTS[node.func.id](*args, **kwargs)
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float | str):
            return node.value
        if isinstance(node, ast.List):
            return [build(e) for e in node.elts]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -build(node.operand)
        raise ValueError("not an event literal")

    try:
        event = build(tree)
    except (ValueError, TypeError):
        return None
    return event if isinstance(event, _dp_event.DpEvent) else None


def mechanism_from_json(text: str) -> StoredMechanism | None:
    """The stored mechanism of a ledger row, or None when it cannot be composed.

    Accepts the JSON form of :func:`mechanism_to_json` and, for rows written before it, the
    ``repr`` of a dp-accounting event (parsed without ``eval``; replace-one when it samples
    without replacement, as GPOPE's uniform sampling does).
    """
    try:
        payload = json.loads(text)
    except (TypeError, ValueError):
        payload = None
    if isinstance(payload, dict) and payload.get("format") == MECHANISM_FORMAT:
        return StoredMechanism(
            _from_plain(payload["event"]), str(payload["relation"]), str(payload.get("label", "")),
            bool(payload.get("every_relation", False)))
    event = _legacy_event(text or "")
    if event is None:
        return None
    relation = "add_or_remove_one"
    for name, rel in _LEGACY_RELATION.items():
        if name in text:
            relation = rel
    return StoredMechanism(event, relation, text.split(":")[0] if ":" in text else "")


def rdp_curve(mechanism: StoredMechanism, orders: Sequence[float] = FILTER_ORDERS) -> np.ndarray:
    """RDP of the mechanism at ``orders`` (dp-accounting's RdpAccountant).

    Raises:
        AccountingError: dp-accounting cannot account for the event.
    """
    accountant = RdpAccountant(orders=list(orders), neighboring_relation=RELATIONS[mechanism.relation])
    if not accountant.supports(mechanism.event):
        raise AccountingError(
            f"dp-accounting's RDP accountant cannot compose {mechanism.event!r} under "
            f"{mechanism.relation}."
        )
    accountant.compose(mechanism.event)
    return np.asarray(accountant._rdp, dtype=np.float64)


def filter_epsilon(curves: Iterable[tuple[str, np.ndarray]], delta: float,
                   orders: Sequence[float] = FILTER_ORDERS) -> float:
    """Epsilon certified by the ledger's Rényi filter for runs with these ``(relation, RDP
    curve at orders)``: ``sum over relations of min over orders of conv(sum of rho(alpha),
    delta / (|L| R))``; 0 for no runs; ``inf`` when nothing is certified."""
    by_relation: dict[str, np.ndarray] = {}
    for relation, curve in curves:
        by_relation[relation] = by_relation.get(relation, 0.0) + np.asarray(curve, dtype=np.float64)
    if not by_relation:
        return 0.0
    share = delta / (len(orders) * len(by_relation))
    total = 0.0
    for curve in by_relation.values():
        if not np.all(np.isfinite(curve)) and not np.any(np.isfinite(curve)):
            return math.inf
        eps, _ = compute_epsilon(list(orders), curve, share)
        total += float(eps)
    return total
