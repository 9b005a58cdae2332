"""A behaviour policy estimated privately: propensities for an extract that logged none.

For tabular states (``0..S-1``) the behaviour policy is estimated from noisy visit counts:

1. each trajectory's count row ``k_i[s, a] = norm_i * #{t: s_t = s, a_t = a}`` (``norm_i =
   1 / length_scale``: a row's L2 norm is at most ``tau_i / L <= 1``);
2. the clip ``c`` is a private ``clip_quantile`` of the rows' norms (one noisy histogram on a
   public log grid topped by 1, sensitivity 1);
3. the sum of the rows clipped to ``c`` plus ``N(0, (sigma c)^2)`` per cell (sensitivity ``c``);
4. ``mu^(a|s) = (max(N~(s, a), 0) + alpha) / sum_a' (max(N~(s, a'), 0) + alpha)``, pseudo-count
   ``alpha = prior_stds * sigma c`` (post-processing): a cell the noise hides gets the prior's
   share, never a zero propensity.

The value route then runs with ``rho = pi / mu^`` (clamped to ``importance_weight_bound``).
Accounting: ``ComposedDpEvent([histogram, counts])`` (:func:`behaviour_dp_event`), one more part
of the run's event. The estimate's error is NOT carried into the value intervals: they are
conditional on ``mu^`` (they cover a policy whose action weights are ``pi mu / mu^``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from gpope.core.untuned.settings import BehaviourSettings
from gpope.errors import ConfigError

if TYPE_CHECKING:
    from gpope.core.spec import EvaluationSpec
    from gpope.core.trajectories.transitions import Transitions

__all__ = ["BehaviourEstimate", "BehaviourSettings", "behaviour_dp_event", "behaviour_sigmas",
           "count_rows", "count_rows_from_pairs", "release_behaviour", "value_rows_from_pairs",
           "with_estimated_propensities"]


@dataclass(frozen=True)
class BehaviourEstimate:
    """The released estimate: ``probs`` (S, A) rows summing to 1, all > 0 when ``alpha > 0``;
    ``clip`` the private clip of the count rows; ``noise_std`` the std of a cell's noise."""

    probs: np.ndarray
    clip: float
    noise_std: float


def count_rows(transitions: Transitions, spec: EvaluationSpec) -> np.ndarray:
    """(m, S A) per-trajectory count rows ``k_i`` (module docstring, step 1), cell ``s A + a``.

    Raises:
        ConfigError: the spec's map is not tabular (counts need integer states).
    """
    from gpope.core.features import TabularFeatures

    fmap = spec.feature_map
    if not isinstance(fmap, TabularFeatures):
        raise ConfigError(
            f"A behaviour policy is estimated from counts per (state, action), which needs a "
            f"tabular feature map; spec {spec.name!r} has {fmap.to_dict()['kind']!r}. Evaluate "
            "it by the state-action route (gpope.core.state_action) instead.")
    tr = transitions
    n_a = int(spec.target_policy.n_actions)
    cell = fmap.indices(tr.state) * n_a + np.asarray(tr.action, dtype=np.int64)
    tau = np.bincount(tr.traj_index, minlength=tr.n_trajectories)
    norm = (np.full(tr.n_trajectories, 1.0 / float(spec.length_scale))
            if spec.normalization == "transition" else 1.0 / tau)
    rows = np.zeros((tr.n_trajectories, fmap.n_states * n_a))
    np.add.at(rows, (tr.traj_index, cell), norm[tr.traj_index])
    return rows


def release_behaviour(aggregate: Any, *, n_states: int, n_actions: int, m: int,
                      sigma_quantile: float, sigma_counts: float, settings: BehaviourSettings,
                      rng: np.random.Generator) -> BehaviourEstimate:
    """Steps 2-4 of the module docstring, reading the count rows only through ``aggregate``
    (``aggregate(kernel, width)``, as :func:`gpope.core.untuned.release.release_untuned` does); noise
    multipliers ``sigma_quantile`` (histogram) and ``sigma_counts`` (counts)."""
    from gpope.core.mechanisms.clipping import clip_rows
    from gpope.core.mechanisms.quantile import LogGrid
    from gpope.core.untuned.release import _private_quantile

    grid = LogGrid(lo=10.0 ** -settings.grid_decades, hi=1.0,
                   bins_per_decade=settings.bins_per_decade)
    clip = _private_quantile(aggregate, grid, lambda rows: rows, settings.clip_quantile, m=m,
                             sigma=sigma_quantile, rng=rng)
    width = n_states * n_actions
    sums = aggregate(lambda idx, rows: clip_rows(rows, clip).sum(axis=0, keepdims=True), width)
    std = float(sigma_counts * clip)
    noisy = (sums + std * rng.standard_normal(width)).reshape(n_states, n_actions)
    alpha = settings.prior_stds * std
    counts = np.maximum(noisy, 0.0) + alpha
    total = counts.sum(axis=1, keepdims=True)
    probs = np.where(total > 0, counts / np.where(total > 0, total, 1.0), 1.0 / n_actions)
    return BehaviourEstimate(probs=probs, clip=float(clip), noise_std=std)


def behaviour_dp_event(sigma_quantile: float, sigma_counts: float) -> Any:
    """``ComposedDpEvent([histogram, counts])``: both Gaussian mechanisms (add/remove-one)."""
    import dp_accounting

    from gpope.core.mechanisms.quantile import quantile_dp_event

    return dp_accounting.ComposedDpEvent([quantile_dp_event(sigma_quantile),
                                          dp_accounting.GaussianDpEvent(sigma_counts)])


def behaviour_sigmas(total: float, settings: BehaviourSettings) -> tuple[float, float]:
    """(histogram, counts) multipliers as their shares of one Gaussian mechanism ``total``."""
    return (float(total / math.sqrt(settings.quantile_share)),
            float(total / math.sqrt(settings.share)))


def value_rows_from_pairs(rows: np.ndarray, spec: EvaluationSpec, probs: np.ndarray) -> np.ndarray:
    """The value route's statistics rows (n = S) under the public propensities ``probs`` (S, A),
    from the state-action rows of the same trajectories, as the value route would compute them
    with ``behavior_prob = probs[s, a]`` (ratios clamped to ``importance_weight_bound``).
    Post-processing: with ``R[s, (a, s)] = rho(s, a)`` and ``P[(a, s'), s'] = 1``, ``A = R A_Q
    P``, ``b = R b_Q``, ``C = P^T C_Q P`` (the target's rows sum to 1), so one set of stored
    statistics serves both routes and the behaviour estimate (``C_Q``'s diagonal: the counts)."""
    S = int(spec.feature_map.n_features)
    K = int(spec.target_policy.n_actions)
    n = S * K
    rows = np.asarray(rows, dtype=np.float64)
    k = rows.shape[0]
    pi = np.asarray(spec.target_policy.probabilities(spec.feature_map.states()))  # index order
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = np.where(pi > 0, pi / np.asarray(probs, dtype=np.float64), 0.0)  # (S, K)
    if spec.importance_weight_bound is not None:
        rho = np.minimum(rho, float(spec.importance_weight_bound))
    AQ = rows[:, :n * n].reshape(k, K, S, K, S)  # [i, a, s, a', s']
    bQ = rows[:, n * n:n * n + n].reshape(k, K, S)
    CQ = rows[:, n * n + n:].reshape(k, K, S, K, S)
    A = np.einsum("as,iasbt->ist", rho.T, AQ)
    b = np.einsum("as,ias->is", rho.T, bQ)
    C = CQ.sum(axis=(1, 3))
    return np.concatenate([A.reshape(k, S * S), b, C.reshape(k, S * S)], axis=1)


def count_rows_from_pairs(rows: np.ndarray, spec: EvaluationSpec) -> np.ndarray:
    """(k, S A) count rows (module docstring, step 1, cell ``s A + a``) read off the state-action
    rows' ``C_Q`` diagonal (feature ``a S + s``): the same numbers :func:`count_rows` gives."""
    S = int(spec.feature_map.n_features)
    K = int(spec.target_policy.n_actions)
    n = S * K
    rows = np.asarray(rows, dtype=np.float64)
    diag = rows[:, n * n + n:].reshape(-1, n, n)[:, np.arange(n), np.arange(n)]
    return diag.reshape(-1, K, S).transpose(0, 2, 1).reshape(-1, n)


def with_estimated_propensities(transitions: Transitions, spec: EvaluationSpec,
                                estimate: BehaviourEstimate) -> Transitions:
    """``transitions`` with ``behavior_prob`` = ``mu^(a_t | s_t)`` (post-processing)."""
    import dataclasses

    s = spec.feature_map.indices(transitions.state)
    p = estimate.probs[s, np.asarray(transitions.action, dtype=np.int64)]
    return dataclasses.replace(transitions, behavior_prob=np.clip(p, 1e-12, 1.0))
