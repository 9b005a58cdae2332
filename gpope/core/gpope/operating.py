"""The operating point of a private evaluation: compute budget, batch, steps, clip (all public).

GPOPE's error at a given (epsilon, delta) is dominated by optimisation when it touches too few
trajectories, so the compute budget is a first-class setting, stated in passes over the data:

* **budget**: ``passes`` P = trajectories touched / m, and ``iterations`` N (noisy steps). With
  Poisson sampling the rate is q = P / N (expected batch B = q m); the solver touches N q m = P m
  trajectories in expectation. Instead of P one may give ``batch_rate`` q or ``batch_size`` B
  (q = B / m); instead of N, P with q or B (N = ceil(P / q)). With uniform sampling (one
  trajectory per step, the paper) N = ``iterations`` or ceil(P m). The paper's configuration is
  ``sampling: uniform, iterations: 20000``.
* **steps**: ``step_schedule: inverse`` with ``step_offset_fraction`` f gives beta_i =
  eta / (i + f N); the steps sum to about eta ln((1 + f) / f).
* **why this transfers across m**: at fixed (P, N, f, eta), q, sigma and the steps are the same
  at every m; only the batch B = q m grows, so the sampling and privacy noise of each averaged
  gradient shrink like 1 / sqrt(m) and 1 / m.
* **clip and step size**: the privacy noise scales like h sigma(epsilon) / m, so the best clip h
  and step size eta depend on (m, epsilon) mainly through m epsilon.

The rule. ``gpope tune --spec FILE`` tunes (clip, step size) on a PUBLIC simulated cohort of
m_pub trajectories at a grid of epsilons and stores one :class:`TunedPoint` per epsilon in the
spec's ``evaluation:`` block (with the cohort's seed, size and grid under ``tuning``). An evaluation
at (m, epsilon) uses the tuned point whose m_pub epsilon_k is nearest to m epsilon on a log scale
(:func:`select_tuned`); P, N, f, sampling and averaging are the block's fixed settings.

Layers. Settings come from the command line (or the caller), then the spec's block, then the
configuration's ``evaluation:`` section (:func:`merge_layers`): the first layer that sets a key
wins, except that the budget keys (P, N, q, B) are taken together while they stay consistent
(at most two, never both q and B), and ``step_offset_fraction`` / ``step_offset`` as a pair.

Everything here is public configuration: nothing is computed from private data (m is public).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpope.core.validation import check_choice, check_int, check_number
from gpope.errors import ConfigError

__all__ = ["BUDGET_KEYS", "INTERVAL_KEYS", "OFFSET_KEYS", "SOLVER_KEYS", "SPEC_BLOCK_RECORDS",
           "TunedPoint", "check_layer_rules", "check_spec_layer", "interval_groups_for",
           "merge_layers", "outside_tuned", "parse_spec_block", "resolve_budget",
           "resolve_step_offset", "select_tuned"]

#: Solver settings an ``evaluation:`` block (and ``gpope evaluate``'s flags) may set.
SOLVER_KEYS = ("sampling", "accountant", "passes", "batch_size", "iterations", "batch_rate", "clip",
               "step_size", "step_schedule", "step_offset", "step_offset_fraction", "averaging",
               "tail_fraction")
#: Interval settings an ``evaluation:`` block may set (chosen on PUBLIC studies, provenance under
#: ``intervals_provenance``): the SSP clip quantile and the rule of GPOPE's disjoint-groups interval
#: (:func:`interval_groups_for`).
INTERVAL_KEYS = ("ssp_clip_quantile", "interval_groups", "interval_groups_min_patients",
                 "interval_groups_min_m_epsilon")
#: The budget keys: any two determine (N, q), except batch_rate with batch_size.
BUDGET_KEYS = ("passes", "iterations", "batch_rate", "batch_size")
#: Alternatives: the first layer that sets either decides both.
OFFSET_KEYS = ("step_offset_fraction", "step_offset")


def _budget_ok(keys: set[str]) -> bool:
    return len(keys) <= 2 and not {"batch_rate", "batch_size"} <= keys


def merge_layers(*layers: dict[str, Any]) -> dict[str, Any]:
    """Merge setting layers, highest precedence first (module docstring); None means "not set"."""
    out: dict[str, Any] = {}
    budget: set[str] = set()
    offset_done = False
    for layer in layers:
        items = {k: v for k, v in layer.items() if v is not None}
        for k, v in items.items():
            if k in BUDGET_KEYS:
                if k not in budget and _budget_ok(budget | {k}):
                    budget.add(k)
                    out[k] = v
            elif k in OFFSET_KEYS:
                continue
            elif k not in out:
                out[k] = v
        if not offset_done and any(k in items for k in OFFSET_KEYS):
            for k in OFFSET_KEYS:
                if k in items:
                    out[k] = items[k]
            offset_done = True
    return out


@dataclass(frozen=True, kw_only=True)
class TunedPoint:
    """(clip, step size) tuned on public data at one epsilon (> 0); ``score`` is the tuning
    criterion at the winner (median relative MSPBE on public data), or None."""

    epsilon: float
    clip: float
    step_size: float
    score: float | None = None

    def __post_init__(self) -> None:
        o = "TunedPoint"
        object.__setattr__(self, "epsilon", check_number(o, "epsilon", self.epsilon, gt=0.0))
        object.__setattr__(self, "clip", check_number(o, "clip", self.clip, gt=0.0))
        object.__setattr__(self, "step_size", check_number(o, "step_size", self.step_size, gt=0.0))
        if self.score is not None:
            object.__setattr__(self, "score", float(self.score))

    def to_dict(self) -> dict[str, Any]:
        """Plain form (YAML/JSON)."""
        d: dict[str, Any] = {"epsilon": self.epsilon, "clip": self.clip,
                             "step_size": self.step_size}
        if self.score is not None:
            d["score"] = round(self.score, 6)
        return d


#: The keys of a spec's ``evaluation:`` block besides its settings.
SPEC_BLOCK_RECORDS = ("tuned", "tuning", "intervals_provenance")


def check_layer_rules(values: Mapping[str, Any], where: str) -> None:
    """The rules every layer that fixes a run's budget keeps (the spec's block, the
    configuration's section): at most two budget keys and not both ``batch_rate`` and
    ``batch_size``; not both step offsets.

    Raises:
        ConfigError: naming ``where`` and the keys to drop.
    """
    budget = sorted(k for k in BUDGET_KEYS if values.get(k) is not None)
    if not _budget_ok(set(budget)):
        raise ConfigError(
            f"{where} over-determines the budget: give at most two of passes, iterations, "
            "batch_rate, batch_size, and not both batch_rate and batch_size (see "
            f"gpope.core.gpope.operating). Got {budget}; drop the others.")
    if values.get("step_offset") is not None and values.get("step_offset_fraction") is not None:
        raise ConfigError(f"{where} sets both 'step_offset' and 'step_offset_fraction'; they are "
                          "alternatives. Keep one.")


def check_spec_layer(values: Mapping[str, Any], tuned: tuple[TunedPoint, ...],
                     tuning: Mapping[str, Any], provenance: Mapping[str, Any]
                     ) -> tuple[TunedPoint, ...]:
    """The rules of a spec's ``evaluation:`` layer beyond each setting's constraint; returns the
    tuned points sorted by epsilon.

    Only solver and interval settings (:data:`SOLVER_KEYS`, :data:`INTERVAL_KEYS`); the budget
    and offset rules (:func:`check_layer_rules`); interval thresholds only with
    ``interval_groups``; one tuned point per epsilon, tuned at a recorded public cohort size
    (``tuning['patients']``).

    Raises:
        ConfigError: in the words of the block's YAML keys.
    """
    allowed = (*SOLVER_KEYS, *INTERVAL_KEYS)
    unknown = sorted(set(values) - set(allowed))
    if unknown:
        raise ConfigError(f"The evaluation block cannot set {unknown}; valid settings: "
                          f"{', '.join(allowed)}.")
    thresholds = [k for k in INTERVAL_KEYS[2:] if values.get(k) is not None]
    if thresholds and values.get("interval_groups") is None:
        raise ConfigError(f"The evaluation block sets {', '.join(thresholds)} but not "
                          "'interval_groups': the thresholds say when the block's interval_groups "
                          "K applies. Set interval_groups (K >= 2) or drop them.")
    for name, record in (("tuning", tuning), ("intervals_provenance", provenance)):
        if not isinstance(record, Mapping):
            raise ConfigError(f"evaluation.{name} must be a mapping (recorded provenance). Got "
                              f"{record!r} instead.")
    check_layer_rules(values, "The evaluation block")
    points = tuple(sorted(tuned, key=lambda p: p.epsilon))
    if len({p.epsilon for p in points}) != len(points):
        raise ConfigError("evaluation.tuned lists an epsilon twice; keep one point per epsilon.")
    if points and tuning.get("patients") is None:
        raise ConfigError("evaluation.tuned needs evaluation.tuning.patients (the public cohort "
                          "size the points were tuned at); re-run `gpope tune --spec FILE`.")
    return points


def parse_spec_block(data: Mapping[str, Any], where: str = "evaluation"
                     ) -> tuple[dict[str, Any], tuple[TunedPoint, ...], dict[str, Any],
                                dict[str, Any]]:
    """(settings, tuned points, tuning, intervals_provenance) of a spec's YAML ``evaluation:``
    block; unknown keys raise ConfigError naming ``where``."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where} must be a mapping. Got {data!r} instead.")
    valid = (*SOLVER_KEYS, *INTERVAL_KEYS, *SPEC_BLOCK_RECORDS)
    unknown = sorted(set(data) - set(valid))
    if unknown:
        raise ConfigError(f"Unknown key(s) {unknown} in {where}; valid keys: {', '.join(valid)}.")
    values = {k: data[k] for k in (*SOLVER_KEYS, *INTERVAL_KEYS) if data.get(k) is not None}
    tuned = data.get("tuned") or []
    if not isinstance(tuned, list):
        raise ConfigError(f"{where}.tuned must be a list of {{epsilon, clip, step_size}}.")
    points = []
    for i, p in enumerate(tuned):
        if not isinstance(p, Mapping) or not {"epsilon", "clip", "step_size"} <= set(p):
            raise ConfigError(f"{where}.tuned[{i}] must be a mapping with epsilon, clip and "
                              f"step_size. Got {p!r} instead.")
        extra = sorted(set(p) - {"epsilon", "clip", "step_size", "score"})
        if extra:
            raise ConfigError(f"Unknown key(s) {extra} in {where}.tuned[{i}].")
        points.append(TunedPoint(**{k: p[k] for k in p}))
    tuning = data.get("tuning") or {}
    if not isinstance(tuning, Mapping):
        raise ConfigError(f"{where}.tuning must be a mapping. Got {tuning!r} instead.")
    return values, tuple(points), dict(tuning), data.get("intervals_provenance") or {}


def select_tuned(values: Mapping[str, Any], tuned: tuple[TunedPoint, ...], public_size: int | None,
                 m: int, epsilon: float) -> tuple[dict[str, Any], TunedPoint | None]:
    """A spec layer's solver settings for an evaluation of m trajectories at ``epsilon``: its
    settings, with clip and step_size of the tuned point whose m_pub epsilon_k is nearest to
    m epsilon on a log scale; (settings, the point or None)."""
    m = check_int("select", "m", m, ge=1)
    epsilon = check_number("select", "epsilon", epsilon, gt=0.0)
    out = {k: values[k] for k in SOLVER_KEYS if values.get(k) is not None}
    point = None
    if tuned:
        target = math.log(m * epsilon)
        m_pub = float(public_size)  # type: ignore[arg-type]
        point = min(tuned, key=lambda p: (abs(math.log(m_pub * p.epsilon) - target), p.epsilon))
        out["clip"] = point.clip
        out["step_size"] = point.step_size
    return out, point


def outside_tuned(tuned: tuple[TunedPoint, ...], tuning: Mapping[str, Any], m: int,
                  epsilon: float, *, max_length: int | None = None, factor: float = 2.0
                  ) -> str | None:
    """Why an evaluation of ``m`` trajectories at ``epsilon`` lies outside what was tuned, or
    None when it lies inside.

    Outside: m epsilon more than ``factor`` times below the smallest or above the largest
    m_pub epsilon_k of the tuned points (the tuned clip and step size depend on (m, epsilon)
    mainly through m epsilon, see the module docstring), or an episode cap ``max_length``
    other than the tuning cohort's ``tuning['max_length']``. Nothing to say without tuned
    points.
    """
    public_size = tuning.get("patients")
    if not tuned or public_size is None:
        return None
    public_size = int(public_size)
    reasons = []
    scale = m * epsilon
    lo = min(public_size * p.epsilon for p in tuned)
    hi = max(public_size * p.epsilon for p in tuned)
    if scale < lo / factor or scale > hi * factor:
        reasons.append(f"m*epsilon = {scale:.3g} is outside the tuned range {lo:.3g}..{hi:.3g} "
                       f"(public cohort of {public_size} trajectories at epsilon "
                       f"{', '.join(f'{p.epsilon:g}' for p in tuned)})")
    tuned_length = tuning.get("max_length")
    if max_length is not None and tuned_length is not None and int(tuned_length) != max_length:
        reasons.append(f"episodes of at most {max_length} decisions, tuned on "
                       f"{int(tuned_length)}")
    if not reasons:
        return None
    return ("WARNING: settings outside what was tuned: " + "; ".join(reasons) + ". The tuned "
            "clip and step size may be far from right here: check the relative MSPBE, or "
            "tune for this size with `gpope tune --spec FILE`.")


def interval_groups_for(groups: int, *, m: int, epsilon: float, min_patients: int | None = None,
                        min_m_epsilon: float | None = None) -> tuple[int, str | None]:
    """(K, why not) of the disjoint-groups rule: ``groups`` where the run's PUBLIC m and epsilon
    meet both thresholds (m >= ``min_patients``, m epsilon >= ``min_m_epsilon``; None = no
    threshold), else 0 (the hull interval) with the reason.

    Why m epsilon: each group's privacy noise relative to its gradient grows like K / (m epsilon),
    and GPOPE's clipping turns that noise into a bias towards 0 that the t interval of the group
    spread does not see (docs/RESULTS.md, "When is an interval bounded"); why m as
    well: each group's own sampling error. Both are public (m by DESIGN.md's privacy rules).
    """
    k = int(groups)
    if k < 2:
        return 0, None
    lacks = []
    if min_patients and m < min_patients:
        lacks.append(f"m = {m} < interval_groups_min_patients = {min_patients}")
    if min_m_epsilon and m * epsilon < min_m_epsilon:
        lacks.append(f"m epsilon = {m * epsilon:.4g} < interval_groups_min_m_epsilon = "
                     f"{min_m_epsilon:.4g}")
    if lacks:
        return 0, (f"interval_groups {k} not applied ({'; '.join(lacks)}): the interval is the "
                   "hull of the noisy-statistics interval and the value")
    return k, None


def resolve_budget(*, m: int, sampling: str, passes: float | None, batch_size: float | None,
                   iterations: int | None, batch_rate: float | None) -> tuple[int, float | None]:
    """(N, q) of a run from the budget settings (see the module docstring).

    Poisson: with N = ``iterations``: q = P / N, else ``batch_rate``, else B / m, else 1 / m;
    without N: q = ``batch_rate`` or B / m, N = ceil(P / q). q is capped at 1. Uniform: q = None,
    N = ``iterations`` or ceil(P m).

    Raises:
        ConfigError: no N and no P; P without a batch setting and without N; a batch setting
            with uniform sampling.
    """
    m = check_int("resolve_budget", "m", m, ge=1)
    check_choice("resolve_budget", "sampling", sampling, ("uniform", "poisson"))
    if iterations is None and passes is None:
        raise ConfigError("The run's compute budget is not set: give 'passes' (trajectories "
                          "touched / m) and/or 'iterations' (N) in the spec's evaluation: block, "
                          "the configuration or on the command line (--passes / --iterations).")
    N = None if iterations is None else check_int("resolve_budget", "iterations", iterations, ge=1)
    P = None if passes is None else check_number("resolve_budget", "passes", passes, gt=0.0)
    if sampling == "uniform":
        if batch_rate is not None or batch_size is not None:
            raise ConfigError("'batch_rate' / 'batch_size' apply only to sampling 'poisson' "
                              "(uniform sampling draws one trajectory per step). Got "
                              f"batch_rate={batch_rate!r}, batch_size={batch_size!r}.")
        return (N if N is not None else max(1, math.ceil(P * m - 1e-9))), None  # type: ignore[operator]
    if batch_rate is not None:
        q = check_number("resolve_budget", "batch_rate", batch_rate, gt=0.0, le=1.0)
    elif batch_size is not None:
        q = min(1.0, check_number("resolve_budget", "batch_size", batch_size, ge=1.0) / m)
    else:
        q = None
    if N is not None:
        if P is not None:
            q = min(1.0, P / N)
        return N, (q if q is not None else 1.0 / m)
    if q is None:
        raise ConfigError(f"'passes' ({P}) alone does not fix the Poisson batch: also give "
                          "'iterations' (then q = passes / iterations), 'batch_rate' or "
                          "'batch_size'.")
    # P / q carries a rounding error of a few ulps (39 / (1 / 499999) = 19499961.000000004): a
    # slack of 8 ulps keeps ceil from adding a whole step for it, and stays below any genuine
    # fraction of a step (282.06564640684576 x 9999999 = 2820656182.0028 needs 2820656183).
    return max(1, math.ceil(P / q * (1.0 - 8.0 * 2.0**-53))), q  # type: ignore[operator]


def resolve_step_offset(*, iterations: int, step_offset: float | None,
                        step_offset_fraction: float | None) -> float:
    """i0 of the inverse schedule: ``step_offset_fraction`` N if given, else ``step_offset``
    (default 1)."""
    if step_offset_fraction is not None:
        return float(check_number("resolve_step_offset", "step_offset_fraction",
                                  step_offset_fraction, ge=0.0)) * int(iterations)
    return 1.0 if step_offset is None else float(step_offset)
