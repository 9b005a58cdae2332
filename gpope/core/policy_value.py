"""Per-patient terms of the policy value J(target), the behaviour value J(behaviour) and their
contrast, and the identified set they bound.

The estimand. For a dataset whose episodes are recorded for at most ``horizon`` decisions H (the
dataset's public episode cap; decisions at t >= H are not counted), the value of a policy pi over
the data's initial states is

    J(pi) = E_pi[ sum_{t < T} gamma^t r_t ],      T = the recorded episode's length <= H,

with rewards after the end of a record counting 0 (a terminal state pays nothing more; a record
cut at the cap H ends the sum). J(behaviour) is the observed discounted return's expectation.

Importance sampling and its clipping. With per-decision ratios w_t = pi(a_t|s_t) / mu(a_t|s_t)
and cumulative weights rho_t = w_0 ... w_t (frozen after the record ends), the per-decision
identity E_pi[r_t] = E_mu[rho_t r_t] holds. rho_t is unbounded, so each patient's weights are
replaced by smaller ones: w'_t = lambda_i min(rho_t, C) <= rho_t, with C the public weight clip and
lambda_i in (0, 1] a per-patient factor that bounds the patient's contribution (chosen by the
release, :mod:`gpope.core.policy_value_release`). For ANY such weights

    J(pi) = sum_t gamma^t ( E[w'_t r_t] + E[(rho_t - w'_t) r_t] ),

and the second part is bounded without assumptions: rho_t - w'_t >= 0, its mass
E[rho_t - w'_t] <= 1 - E[w'_t] (E_mu[rho_t] <= 1, with equality when pi is supported where mu is),
and r_t lies in the public reward range (0 after the end of a record). Hence, with
a_i = sum_t gamma^t w'_t r_t, n_i = sum_{t < H} gamma^t w'_t and S = sum_{t < H} gamma^t,

    J(pi) in [ E[a] + lo' (S - E[n]),  E[a] + hi' (S - E[n]) ],   lo' = min(lo, 0), hi' = max(hi, 0).

This is a partial-identification (Manski-type) set: clipping never moves the estimand outside it,
so the bias of clipping is inside the released interval by construction. Where no weight is
clipped (on-policy, or ratios that never exceed C and lambda = 1), E[n] = S and the set is the
point E[a] (per-decision importance sampling). A spec whose target has one action is on-policy by
construction (``on_policy``): every ratio is 1 and n = S is public.

The behaviour value is the mean of g_i = sum_t gamma^t r_t (rho = 1).

The doubly robust form (:func:`doubly_robust_terms`) replaces r_t by the TD error delta_t of a
value function V (post-processing of the run's released theta): J(pi) = E[V(s_0)] + sum_t
gamma^t E[rho_t delta_t]. Its identified set is E[v0 + a] + [d_lo', d_hi'] (S - E[n]) with the TD
error's public range (``PolicyValueBounds.target_range``) in place of the reward range: whatever
V is, that part is 1 + (1 + gamma)(V_hi - V_lo) / (hi' - lo') times the importance sampling one
(with V's public range S (lo', hi')), so the control variate can only narrow the sampling part.
docs/RESULTS.md measures both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpope.core.bounds import check_return_bounds
from gpope.core.trajectories.transitions import Transitions
from gpope.core.validation import check_int, check_number
from gpope.errors import ConfigError, SchemaError

__all__ = [
    "QUANTITIES",
    "PolicyValueBounds",
    "PolicyValueTerms",
    "doubly_robust_terms",
    "per_decision_weights",
    "policy_value_terms",
    "policy_value_unavailable",
    "spec_bounds",
]

#: The reserved names of the released scalars: their ``state`` in gold/released_values (a spec
#: may not name a reference state so).
QUANTITIES = ("policy_value", "behaviour_value", "policy_contrast")


@dataclass(frozen=True)
class PolicyValueBounds:
    """The public constants of the policy-value estimands.

    Attributes:
        gamma: discount in [0, 1].
        horizon: H >= 1, the dataset's public episode cap (decisions per record at most).
        weight_clip: C > 0, the public clip of the cumulative importance weight rho_t (the spec's
            ``importance_weight_bound``).
        reward_bounds: public range (lo, hi) of a raw reward (the spec's ``reward_bounds``).
        on_policy: public fact that every ratio is 1 (the target policy has one action, so the
            behaviour had no other choice): no weight is clipped and n = S for every patient.
        value_range: public (V_lo, V_hi) of the doubly robust control variate V (None: no control
            variate, per-decision importance sampling). Off-policy only: on-policy the doubly
            robust terms telescope to the return.
        return_bounds: public (R_lo, R_hi), R_lo <= 0 <= R_hi, of one record's discounted return
            under any policy (the spec's ``return_bounds``), or None: the rewards' range alone.
    """

    gamma: float
    horizon: int
    weight_clip: float
    reward_bounds: tuple[float, float]
    on_policy: bool = False
    value_range: tuple[float, float] | None = None
    return_bounds: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        check_number("PolicyValueBounds", "gamma", self.gamma, ge=0.0, le=1.0)
        check_int("PolicyValueBounds", "horizon", self.horizon, ge=1)
        check_number("PolicyValueBounds", "weight_clip", self.weight_clip, gt=0.0)
        lo, hi = self.reward_bounds
        check_number("PolicyValueBounds", "reward_bounds[0]", lo)
        check_number("PolicyValueBounds", "reward_bounds[1]", hi, gt=lo)
        object.__setattr__(self, "reward_bounds", (float(lo), float(hi)))
        if not isinstance(self.on_policy, bool):
            raise ConfigError(f"PolicyValueBounds.on_policy must be a bool. Got {self.on_policy!r}.")
        if self.value_range is not None:
            vlo, vhi = (check_number("PolicyValueBounds", f"value_range[{i}]", v)
                        for i, v in enumerate(self.value_range))
            if not vlo <= vhi or self.on_policy:
                raise ConfigError(
                    "PolicyValueBounds.value_range must be (low, high) with low <= high, and only "
                    f"off-policy (on-policy the doubly robust terms are the return). Got "
                    f"{self.value_range} with on_policy={self.on_policy}.")
            object.__setattr__(self, "value_range", (float(vlo), float(vhi)))
        object.__setattr__(self, "return_bounds", check_return_bounds(
            "PolicyValueBounds", self.return_bounds, self.reward_bounds))

    @classmethod
    def from_spec(cls, spec, *, horizon: int) -> PolicyValueBounds:
        """The bounds of an :class:`~gpope.core.spec.EvaluationSpec`: its gamma, weight bound and
        reward bounds, with the dataset's public episode cap ``horizon``.

        Raises:
            ConfigError: the spec lacks ``importance_weight_bound`` or ``reward_bounds`` (the
                policy value needs both public bounds).
        """
        if spec.importance_weight_bound is None or spec.reward_bounds is None:
            raise ConfigError(
                f"Spec {spec.name!r} must set 'importance_weight_bound' and 'reward_bounds' for "
                "the policy value release (public bounds of a per-decision ratio and of a raw "
                "reward, chosen on public or simulated data); add both to the spec file."
            )
        return cls(gamma=float(spec.gamma), horizon=int(horizon),
                   weight_clip=float(spec.importance_weight_bound),
                   reward_bounds=tuple(spec.reward_bounds),
                   on_policy=int(spec.target_policy.n_actions) == 1,
                   return_bounds=spec.return_bounds)

    @property
    def discount_mass(self) -> float:
        """S = sum_{t < H} gamma^t."""
        g = float(self.gamma)
        return float(self.horizon) if g == 1.0 else (1.0 - g ** self.horizon) / (1.0 - g)

    @property
    def return_range(self) -> tuple[float, float]:
        """(J_lo, J_hi) = (min(lo, S lo), max(hi, S hi)): the public range of the value J of any
        policy, and of one record's discounted return. A record holds at least one decision and
        at most H, each reward in [lo, hi] and none after the record ends, within
        ``return_bounds`` when they are set; nothing about the data enters it."""
        lo, hi = self.reward_bounds
        s = self.discount_mass
        return self._within_return_bounds(min(lo, s * lo), max(hi, s * hi))

    @property
    def g_limits(self) -> tuple[float, float]:
        """(G_lo, G_hi): the public range of one record's discounted return g, with 0 (a record
        cut before any reward): ``(S lo', S hi')`` of :attr:`range_with_zero`, within
        ``return_bounds`` when they are set."""
        lo0, hi0 = self.range_with_zero
        s = self.discount_mass
        return self._within_return_bounds(s * lo0, s * hi0)

    def _within_return_bounds(self, lo: float, hi: float) -> tuple[float, float]:
        """(lo, hi) cut to ``return_bounds`` where they are set."""
        if self.return_bounds is None:
            return lo, hi
        return max(lo, self.return_bounds[0]), min(hi, self.return_bounds[1])

    @property
    def range_with_zero(self) -> tuple[float, float]:
        """(lo', hi') = (min(lo, 0), max(hi, 0)): the range of a reward, 0 after a record ends."""
        lo, hi = self.reward_bounds
        return min(lo, 0.0), max(hi, 0.0)

    @property
    def control_range(self) -> tuple[float, float]:
        """(V_lo, V_hi) of the control variate; (0, 0) without one."""
        return self.value_range if self.value_range is not None else (0.0, 0.0)

    @property
    def target_range(self) -> tuple[float, float]:
        """The range, with 0, of what the target's weights multiply: the reward (importance
        sampling) or the TD error r + gamma V' - V (doubly robust; V' = 0 after a record's last
        decision): (min(lo' + gamma min(V_lo, 0) - V_hi, 0), max(hi' + gamma max(V_hi, 0) - V_lo, 0))."""
        lo0, hi0 = self.range_with_zero
        if self.value_range is None:
            return lo0, hi0
        vlo, vhi = self.value_range
        g = float(self.gamma)
        return min(lo0 + g * min(vlo, 0.0) - vhi, 0.0), max(hi0 + g * max(vhi, 0.0) - vlo, 0.0)


def policy_value_unavailable(spec) -> str | None:
    """Why ``spec`` cannot carry the policy value release (None: it can). Public: the spec
    needs ``importance_weight_bound``, ``reward_bounds`` and ``length_scale`` (the horizon H)."""
    missing = [k for k in ("importance_weight_bound", "reward_bounds", "length_scale")
               if getattr(spec, k, None) is None]
    if missing:
        return (f"spec {spec.name!r} sets no {', '.join(missing)}: the policy value release needs "
                "public bounds of a ratio and a reward and the episode cap (length_scale)")
    return None


def spec_bounds(spec) -> PolicyValueBounds:
    """The :class:`PolicyValueBounds` of a spec (horizon = its ``length_scale``)."""
    return PolicyValueBounds.from_spec(spec, horizon=math.ceil(float(spec.length_scale)))


@dataclass(frozen=True, eq=False)
class PolicyValueTerms:
    """Per-patient terms before the release's per-patient factor (lambda = 1).

    Attributes:
        g: (m,) observed discounted return sum_t gamma^t r_t (rewards clamped to the bounds).
        a: (m,) sum_t gamma^t min(rho_t, C) r_t (per-decision importance sampling, clipped), or
            with a control variate sum_t gamma^t min(rho_t, C) delta_t (the doubly robust
            correction, :func:`doubly_robust_terms`).
        n: (m,) sum_{t < H} gamma^t min(rho_t, C), rho frozen after the record ends.
        v0: (m,) V(s_0) clamped to the public value range (doubly robust), or None.
    """

    g: np.ndarray
    a: np.ndarray
    n: np.ndarray
    v0: np.ndarray | None = None

    def __post_init__(self) -> None:
        names = ("g", "a", "n") if self.v0 is None else ("g", "a", "n", "v0")
        shapes = {np.shape(getattr(self, k)) for k in names}
        if len(shapes) != 1 or len(next(iter(shapes))) != 1:
            raise SchemaError(f"PolicyValueTerms needs (m,) arrays; got shapes {shapes}.")
        for name in names:
            if not np.all(np.isfinite(getattr(self, name))):
                raise SchemaError(f"PolicyValueTerms.{name} must be finite.")

    @property
    def m(self) -> int:
        """The number of patients."""
        return len(self.g)


def per_decision_weights(transitions: Transitions, ratios: np.ndarray,
                         weight_clip: float) -> np.ndarray:
    """(T,) min(rho_t, C): the clipped cumulative product of the ratios within each trajectory.

    Ratios are clamped to [0, C] first (a per-decision ratio above C already makes rho_t >= C
    impossible to represent more tightly), non-finite ones to C (NaN to 0). Products are
    computed in log space, so a long record cannot overflow.
    """
    w = np.asarray(ratios, dtype=np.float64)
    if w.shape != (len(transitions.traj_index),):
        raise SchemaError(f"ratios must have shape ({len(transitions.traj_index)},); got {w.shape}.")
    w = np.clip(np.nan_to_num(w, nan=0.0, posinf=weight_clip), 0.0, weight_clip)
    with np.errstate(divide="ignore"):
        logw = np.log(w)
    idx = np.asarray(transitions.traj_index, dtype=np.int64)
    # a -inf (ratio 0) stays -inf for the rest of the trajectory: cumsum per trajectory via
    # counting zeros separately from the finite logs
    zero = np.isneginf(logw)
    finite = np.where(zero, 0.0, logw)
    csum = np.cumsum(finite)
    czero = np.cumsum(zero)
    starts = np.concatenate([[0], np.flatnonzero(np.diff(idx)) + 1])
    first = np.repeat(starts, np.diff(np.concatenate([starts, [len(idx)]])))
    base = np.where(first > 0, csum[first - 1], 0.0) if len(idx) else csum
    zbase = np.where(first > 0, czero[first - 1], 0) if len(idx) else czero
    log_rho = csum - base
    dead = (czero - zbase) > 0
    return np.where(dead, 0.0, np.exp(np.minimum(log_rho, math.log(weight_clip))))


def _discounts(transitions: Transitions, bounds: PolicyValueBounds) -> np.ndarray:
    """gamma^t of every row, 0 for rows at t >= H (the estimand sums the first H decisions)."""
    t = np.asarray(transitions.t, dtype=np.int64)
    return np.where(t < bounds.horizon, float(bounds.gamma) ** t.astype(np.float64), 0.0)


def _tail_mass(transitions: Transitions, bounds: PolicyValueBounds) -> tuple[np.ndarray, np.ndarray]:
    """(last row of each trajectory (m,), sum_{t = T_i}^{H-1} gamma^t (m,))."""
    m = transitions.n_trajectories
    lengths = np.bincount(transitions.traj_index, minlength=m)
    last = np.cumsum(lengths) - 1
    g = float(bounds.gamma)
    if g == 1.0:
        tail = (bounds.horizon - lengths).astype(np.float64)
    else:
        tail = (g ** lengths.astype(np.float64) - g ** bounds.horizon) / (1.0 - g)
    return last, np.maximum(tail, 0.0)


def policy_value_terms(transitions: Transitions, ratios: np.ndarray,
                       bounds: PolicyValueBounds) -> PolicyValueTerms:
    """Per-patient (g, a, n) of :class:`PolicyValueTerms` from a sorted batch of transitions.

    Rewards are clamped to the public ``reward_bounds`` and ratios to [0, C] (total clipping:
    every term is bounded whatever the data hold): |g| <= S max|r|, |a| <= C S max|r|,
    0 <= n <= C S. The release clamps g into ``bounds.return_bounds`` (the statistics do not
    depend on them).

    Args:
        transitions: m trajectories sorted by (traj_index, t), raw rewards.
        ratios: (T,) per-decision pi(a_t|s_t) / behavior_prob_t
            (:func:`gpope.core.policies.importance_ratios`).
        bounds: the public constants.
    """
    lo, hi = bounds.reward_bounds
    r = np.clip(np.nan_to_num(np.asarray(transitions.reward, dtype=np.float64), nan=0.0,
                              posinf=hi, neginf=lo), lo, hi)
    disc = _discounts(transitions, bounds)
    w = per_decision_weights(transitions, ratios, bounds.weight_clip)
    m = transitions.n_trajectories
    idx = transitions.traj_index
    g = np.bincount(idx, weights=disc * r, minlength=m)
    a = np.bincount(idx, weights=disc * w * r, minlength=m)
    last, tail = _tail_mass(transitions, bounds)
    n = np.bincount(idx, weights=disc * w, minlength=m) + w[last] * tail
    return PolicyValueTerms(g=g, a=a, n=n)


def doubly_robust_terms(transitions: Transitions, ratios: np.ndarray, bounds: PolicyValueBounds,
                        values: np.ndarray, next_values: np.ndarray) -> PolicyValueTerms:
    """Per-patient doubly robust terms: the control variate V(s_0) and the correction.

    J(pi) = E[V(s_0)] + sum_{t < H} gamma^t E[rho_t delta_t] with delta_t = r_t + gamma V(s_{t+1})
    - V(s_t) (V(s_{t+1}) = 0 after a record's last decision and at t = H - 1: the estimand stops
    there) for ANY V,
    so V may be the run's released value function (post-processing of theta, no budget).
    The returned ``a`` is sum_t gamma^t min(rho_t, C) delta_t, ``v0`` = V(s_0), and g, n are
    those of :func:`policy_value_terms`; V is clamped to the public ``bounds.value_range``.
    The identified set of this module holds with E[v0 + a] in place of E[a] and
    ``bounds.target_range`` (the TD error's) in place of the reward range.

    Args:
        values: (T,) V(s_t) of every row; next_values: (T,) V(s_{t+1}).
        bounds: off-policy bounds with a ``value_range``.
    """
    if bounds.value_range is None:
        raise ConfigError("doubly_robust_terms needs bounds with a public value_range (V_lo, V_hi).")
    vlo, vhi = bounds.value_range
    lo, hi = bounds.reward_bounds
    r = np.clip(np.nan_to_num(np.asarray(transitions.reward, dtype=np.float64)), lo, hi)
    v = np.clip(np.nan_to_num(np.asarray(values, dtype=np.float64)), vlo, vhi)
    nv = np.clip(np.nan_to_num(np.asarray(next_values, dtype=np.float64)), vlo, vhi)
    m = transitions.n_trajectories
    last, _ = _tail_mass(transitions, bounds)
    nv = np.where(np.asarray(transitions.t) >= bounds.horizon - 1, 0.0, nv)
    nv[last] = 0.0  # the estimand stops at a record's end and at the cap H
    delta = r + float(bounds.gamma) * nv - v
    disc = _discounts(transitions, bounds)
    w = per_decision_weights(transitions, ratios, bounds.weight_clip)
    first = np.concatenate([[0], last[:-1] + 1])
    base = policy_value_terms(transitions, ratios, bounds)
    a = np.bincount(transitions.traj_index, weights=disc * w * delta, minlength=m)
    return PolicyValueTerms(g=base.g, a=a, n=base.n, v0=v[first])
