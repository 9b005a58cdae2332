"""DP-LSW and DP-LSL: output perturbation of first-visit Monte Carlo least squares.

Balle, Gomrokchi & Precup, "Differentially Private Policy Evaluation", ICML 2016, as specified in
BASELINES.md sections 1.3-1.7 (authors' code ``Evaluator.py``, class ``MCPE``). Both release
``theta(X) + (S(X)/alpha) Z``, ``Z ~ N(0, I_d)``, where ``S`` is a beta-smooth upper bound on the
local sensitivity (Nissim, Raskhodnikova & Smith 2007), which is (epsilon, delta)-DP under
replace-one adjacency (one trajectory = one individual) for ``epsilon <= 1``, ``delta in (0, 1)``.

Choices on the open points of BASELINES.md section 6:

- LSW uses FIXED public weights ``rho`` (ICML-era code; the only choice consistent with the
  noise analysis), not ``rho_s m_s / m``.
- LSW's pseudo-inverse norm is the spectral norm ``1/sigma_min(Gam^{1/2} Phi)`` (valid and
  tighter than the code's Frobenius norm). LSL's ``||Phi||`` is the Frobenius norm (authors).
- Smooth bounds take the square root outside the max over k, as in the authors' code
  (``S = sqrt(max_k e^{-k beta} term_k)``: (beta/2)-smooth, hence beta-smooth).
- LSL objective ``sum_i sum_{s in x_i} rho_s (F_{i,s} - phi_s^T theta)^2 + (lambda/2)||theta||^2``
  and ridge schedule ``lambda = ||rho||_inf ||Phi||_F^2 + c m^p`` with defaults ``c = 100``,
  ``p = 0.4`` (authors' grid ``c in {0.01..1e4}``, ``p = 0.4``).
- LSL's sensitivity: the authors' formula (default, ``sensitivity="authors"``) or the
  self-contained strong-convexity bound of BASELINES.md 1.6 (``sensitivity="derived"``; needs
  ``||phi(s)||_2 <= 1`` and ``sum_s rho_s <= 1``).
- NRS constants of the newer author code: ``alpha = eps / (5 sqrt(2 ln(2/delta)))``,
  ``beta = eps / (4 (d + ln(2/delta)))``.
- Each first-visit return is clipped to the public range ``[0, F_max]`` before averaging, so the
  sensitivity analysis holds whatever the data (rewards must be non-negative; shift them
  publicly otherwise).

Privacy hygiene: only ``theta`` is private-safe to release. The noise scale and visit counts are
data-dependent; they are kept in ``DPLSResult.diagnostics`` flagged ``"private": True``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple, TypedDict, Unpack

import numpy as np

from gpope.core.baselines._common import as_matrix, as_vector
from gpope.core.baselines.first_visit import first_visit_statistics
from gpope.core.baselines.smooth import (
    LSLSensitivity,
    lsl_estimate,
    lsl_regularization,
    lsl_smooth_sensitivity,
    lsw_estimate,
    lsw_smooth_sensitivity,
    nrs_constants,
)
from gpope.core.validation import check_int, check_number
from gpope.errors import ConfigError, DataError

__all__ = ["DPLSInputs", "DPLSResult", "dp_lsl", "dp_lsw"]


@dataclass(frozen=True, eq=False)
class DPLSResult:
    """A DP-LSW / DP-LSL release.

    Attributes:
        theta: (d,) the private estimate ``theta(X) + sigma Z``; (epsilon, delta)-DP.
        epsilon: privacy parameter spent by this release.
        delta: privacy parameter spent by this release.
        mechanism: ``"dp_lsw"`` or ``"dp_lsl"``.
        regularization: lambda of DP-LSL (public: a function of m and public inputs); None for LSW.
        diagnostics: PRIVATE diagnostics (``"private": True``): ``noise_std`` (sigma, data
            dependent), ``smooth_sensitivity`` S(X), and the public constants ``a_inv``, ``beta``.
            Never release or log them as DP outputs.
    """

    theta: np.ndarray
    epsilon: float
    delta: float
    mechanism: str
    regularization: float | None = None
    diagnostics: Mapping[str, Any] = field(default_factory=dict)


class DPLSInputs(TypedDict):
    """The keywords :func:`dp_lsw` and :func:`dp_lsl` share (documented at :func:`dp_lsw`), all
    required."""

    n_states: int | None
    features: object
    weights: object
    gamma: float
    f_max: float
    epsilon: float
    delta: float
    rng: np.random.Generator


def _public_inputs(features: object, weights: object, n_states: int | None, *,
                   distribution: bool) -> tuple[np.ndarray, np.ndarray]:
    if n_states is None:
        raise DataError("n_states (N) is missing: DP-LSW/DP-LSL apply only to finite (tabular or "
                        "aggregated) state sets (BASELINES.md 1.9).")
    phi = as_matrix("features", features, rows=int(n_states))
    rho = as_vector("weights", weights, phi.shape[0])
    if np.any(rho < 0) or not np.any(rho > 0):
        raise ConfigError("The state weights 'weights' must be >= 0 with at least one > 0.")
    if distribution and rho.sum() > 1.0 + 1e-9:
        raise ConfigError("The state weights 'weights' of DP-LSL must sum to <= 1 (a distribution "
                          f"over states); got sum {rho.sum()!r}.")
    return phi, rho


class _Prepared(NamedTuple):
    """What DP-LSW and DP-LSL compute alike before their estimates (all but phi, rho, a_inv and
    beta are private)."""

    phi: np.ndarray
    rho: np.ndarray
    a_inv: float
    beta: float
    counts: np.ndarray
    fbar: np.ndarray
    observed: int


def _check_keywords(owner: str, inputs: Mapping[str, Any], optional: tuple[str, ...]) -> None:
    """Refuse a missing or unknown keyword of :func:`dp_lsw` / :func:`dp_lsl` (``owner``) in
    the caller's words: which keywords it needs, which it does not take, and where they are
    documented. ``optional``: the owner's own optional keywords (named in the message)."""
    required = tuple(DPLSInputs.__annotations__)
    missing = [k for k in required if k not in inputs]
    unknown = sorted(k for k in inputs if k not in required)
    if not missing and not unknown:
        return
    parts = []
    if missing:
        parts.append(f"is missing the required keyword(s) {', '.join(map(repr, missing))}")
    if unknown:
        parts.append(f"got unknown keyword(s) {', '.join(map(repr, unknown))}")
    takes = ", ".join(required) + (f" (optional: {', '.join(optional)})" if optional else "")
    raise TypeError(f"{owner}() {' and '.join(parts)}. It takes the keywords {takes}; "
                    f"help(gpope.core.baselines.{owner}) documents each.")


def _prepare(owner: str, states: object, rewards: object, traj_index: object, *, distribution: bool,
             optional: tuple[str, ...], **inputs: Any) -> _Prepared:
    """The public inputs, the NRS constants and the first-visit statistics of one release.

    A missing or unknown keyword of :func:`dp_lsw` / :func:`dp_lsl` is a TypeError naming
    ``owner`` and the keywords it takes (:func:`_check_keywords`). ``rng`` is checked by
    :func:`_release`.
    """
    _check_keywords(owner, inputs, optional)
    n_states, features, weights = inputs["n_states"], inputs["features"], inputs["weights"]
    gamma, f_max = inputs["gamma"], inputs["f_max"]
    epsilon, delta = inputs["epsilon"], inputs["delta"]
    phi, rho = _public_inputs(features, weights, n_states, distribution=distribution)
    a_inv, beta = nrs_constants(epsilon, delta, phi.shape[1])
    check_number(owner, "gamma", gamma, ge=0.0, le=1.0)
    check_number(owner, "f_max", f_max, gt=0.0)
    counts, fbar = first_visit_statistics(states, rewards, traj_index, n_states=n_states,
                                          gamma=gamma, clip=f_max)
    if counts.sum() == 0:
        raise DataError(f"{owner} needs at least one trajectory; got no transitions.")
    traj = np.asarray(traj_index)
    observed = int(np.count_nonzero(np.diff(traj))) + 1
    return _Prepared(phi, rho, a_inv, beta, counts, fbar, observed)


def _release(theta: np.ndarray, sens: float, prep: _Prepared, inputs: DPLSInputs, mechanism: str,
             regularization: float | None, draws: int | None) -> DPLSResult:
    rng = inputs["rng"]
    if not isinstance(rng, np.random.Generator):
        raise ConfigError(f"'rng' must be a numpy.random.Generator; got {type(rng).__name__}.")
    sigma = prep.a_inv * sens
    shape = (theta.shape[0],) if draws is None else (check_int(mechanism, "draws", draws, ge=1),
                                                     theta.shape[0])
    noisy = theta + sigma * rng.standard_normal(shape)
    diagnostics = MappingProxyType({"private": True, "noise_std": sigma, "smooth_sensitivity": sens,
                                    "a_inv": prep.a_inv, "beta": prep.beta})
    return DPLSResult(theta=noisy, epsilon=float(inputs["epsilon"]), delta=float(inputs["delta"]),
                      mechanism=mechanism, regularization=regularization, diagnostics=diagnostics)


def dp_lsw(states: object, rewards: object, traj_index: object, *, draws: int | None = None,
           **inputs: Unpack[DPLSInputs]) -> DPLSResult:
    """DP-LSW (BASELINES 1.3, 1.5-1.7): LSW with fixed weights plus smooth-sensitivity noise.

    Args:
        states: (T,) integer states ``S_t`` in 0..N-1 (finite / aggregated state sets only).
        rewards: (T,) non-negative rewards ``R_t``.
        traj_index: (T,) trajectory ids, rows grouped by trajectory in time order.
        draws: None for one release; R for R independent noise draws on the same data
            (experiments: the data-dependent parts are computed once), each (epsilon, delta)-DP
            on its own (R releases compose).
        **inputs: the keywords of :class:`DPLSInputs`, all required:
            n_states: N (None is refused).
            features: (N, d) public feature matrix Phi.
            weights: (N,) public fixed state weights rho >= 0 (set 0 on terminal states).
            gamma: discount in [0, 1].
            f_max: public bound on returns (``R_max / (1 - gamma)``); returns are clipped to
                [0, F_max].
            epsilon: in (0, 1].
            delta: in (0, 1).
            rng: generator of the Gaussian noise.

    Returns:
        DPLSResult with the (epsilon, delta)-DP ``theta`` (d,), or (R, d) with ``draws``.
    """
    p = _prepare("dp_lsw", states, rewards, traj_index, distribution=False,
                 optional=("draws",), **inputs)
    theta = lsw_estimate(p.fbar, p.phi, p.rho)
    sens = lsw_smooth_sensitivity(p.counts, p.phi, p.rho, f_max=inputs["f_max"], beta=p.beta)
    return _release(theta, sens, p, inputs, "dp_lsw", None, draws)


def dp_lsl(states: object, rewards: object, traj_index: object, *,
           n_trajectories: int | None = None, regularization: float | None = None,
           sensitivity: LSLSensitivity = "authors", draws: int | None = None,
           **inputs: Unpack[DPLSInputs]) -> DPLSResult:
    """DP-LSL (BASELINES 1.4-1.7): ridge LSL plus smooth-sensitivity Gaussian noise.

    Args:
        states, rewards, traj_index, draws: as in :func:`dp_lsw`.
        n_trajectories: public m (default: the number of trajectories in ``traj_index``).
        regularization: lambda; default the authors' schedule
            ``||rho||_inf ||Phi||_F^2 + 100 m^0.4`` (:func:`lsl_regularization`).
        sensitivity: ``"authors"`` (default) or ``"derived"`` (see :func:`lsl_smooth_sensitivity`).
        **inputs: the keywords of :class:`DPLSInputs`, all required, as in :func:`dp_lsw`, except
            ``weights``: (N,) public state distribution rho (>= 0, sum <= 1).

    Returns:
        DPLSResult with the (epsilon, delta)-DP ``theta`` (d,) and the lambda used.
    """
    p = _prepare("dp_lsl", states, rewards, traj_index, distribution=True, optional=(
        "n_trajectories", "regularization", "sensitivity", "draws"), **inputs)
    m = (p.observed
         if n_trajectories is None
         else check_int("dp_lsl", "n_trajectories", n_trajectories, ge=p.observed))
    lam = (lsl_regularization(m, p.phi, p.rho)
           if regularization is None
           else check_number("dp_lsl", "regularization", regularization, gt=0.0))
    theta = lsl_estimate(p.counts, p.fbar, p.phi, p.rho, lam)
    sens = lsl_smooth_sensitivity(p.counts, p.phi, p.rho, n_trajectories=m, regularization=lam,
                                  f_max=inputs["f_max"], beta=p.beta, sensitivity=sensitivity)
    return _release(theta, sens, p, inputs, "dp_lsl", lam, draws)

