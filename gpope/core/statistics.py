"""Per-trajectory statistics A_i, b_i, C_i and the primal-dual gradients GPOPE samples.

For trajectory i with transitions t (features phi_t, next features phi'_t, reward R_t, importance
ratio rho_t)::

    A_i = norm_i * sum_t rho_t phi_t (phi_t - gamma phi'_t)^T      (n, n)
    b_i = norm_i * sum_t rho_t R_t phi_t                            (n,)
    C_i = norm_i * sum_t phi_t phi_t^T                              (n, n)

with phi'_t = 0 on terminal rows (truncated rows keep it) and

* ``normalization="transition"`` (default): norm_i = 1 / L, L = ``length_scale`` a public
  constant: the population mean is proportional to the per-transition expectation, so
  theta* = A^-1 b is the usual TD fixed point.
* ``normalization="trajectory_mean"`` (the paper, eq. 2.2): norm_i = 1 / tau_i, which couples a
  transition's weight to its trajectory's length and biases the fixed point.

The statistics are held by :class:`~gpope.core.trajectories.stats.TrajectoryStats`; ``"auto"``
picks dense when the dense A and C take at most :data:`DENSE_MAX_BYTES`, otherwise tabular for
one-hot features and compact for the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

import numpy as np

from gpope.core.features import FeatureMap, TabularFeatures
from gpope.core.trajectories.stats import NORMALIZATIONS, TrajectoryStats
from gpope.core.trajectories.transitions import Transitions
from gpope.core.validation import check_choice, check_int, check_number
from gpope.errors import ConfigError, DataError, SchemaError

if TYPE_CHECKING:
    from gpope.core.policies import Policy

__all__ = ["DENSE_MAX_BYTES", "TrajectoryStats", "population_scale", "population_statistics",
           "population_sums", "statistics_from_transitions", "trajectory_statistics"]

Normalization = Literal["transition", "trajectory_mean"]
Representation = Literal["auto", "dense", "compact", "tabular", "sparse"]

#: "auto" stores A and C densely when together they take at most this many bytes.
DENSE_MAX_BYTES: int = 512 * 2**20

_REPRESENTATIONS = ("auto", "dense", "compact", "tabular")


# ---------------------------------------------------------------------- builders
def _one_hot_indices(phi: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(index (T,), is_nonzero (T,)) if every row of phi is one-hot or all zero, else None."""
    nz = phi != 0
    cnt = nz.sum(axis=1)
    if np.any(cnt > 1):
        return None
    idx = np.argmax(nz, axis=1)
    has = cnt == 1
    if np.any(phi[np.arange(len(phi)), idx][has] != 1.0):
        return None
    return idx.astype(np.int64), has


def _validate_common(
    owner: str, n_rows: int, reward: np.ndarray, rho: np.ndarray, traj_index: np.ndarray,
    n_trajectories: int, terminal: np.ndarray, gamma: float, normalization: str,
    length_scale: float | None,
    representation: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Check inputs; return (reward, rho, traj_index, terminal, order) with order sorting by traj."""
    check_number(owner, "gamma", gamma, ge=0.0, le=1.0)
    check_choice(owner, "normalization", normalization, NORMALIZATIONS)
    check_choice(owner, "representation", representation, _REPRESENTATIONS)
    if normalization == "transition":
        if length_scale is None:
            raise ConfigError(
                f"The 'length_scale' parameter of {owner} must be a number > 0 when "
                "normalization='transition' (a public constant such as the maximum trajectory "
                "length). Got None instead."
            )
        check_number(owner, "length_scale", length_scale, gt=0.0)
    arrays = {}
    for name, arr, dtype in (("reward", reward, np.float64), ("rho", rho, np.float64),
                             ("traj_index", traj_index, np.int64), ("terminal", terminal, bool)):
        a = np.asarray(arr)
        if a.shape != (n_rows,):
            raise SchemaError(f"{owner}: {name} must have shape ({n_rows},); got {a.shape}.")
        arrays[name] = a.astype(dtype, copy=False)
    for name in ("reward", "rho"):
        if not np.all(np.isfinite(arrays[name])):
            raise DataError(f"{owner}: {name} must be finite for every transition.")
    if np.any(arrays["rho"] < 0):
        raise DataError(f"{owner}: importance ratios rho must be >= 0.")
    ti = arrays["traj_index"]
    m = int(n_trajectories)
    if m < 1:
        raise DataError(f"{owner}: n_trajectories must be >= 1; got {n_trajectories}.")
    if n_rows and (ti.min() < 0 or ti.max() >= m):
        raise DataError(f"{owner}: traj_index must lie in 0..{m - 1}; got {ti.min()}..{ti.max()}.")
    counts = np.bincount(ti, minlength=m)
    if np.any(counts == 0):
        raise DataError(
            f"{owner}: {int(np.sum(counts == 0))} of {m} trajectories have no transitions; "
            "traj_index must be dense 0..m-1."
        )
    order = np.argsort(ti, kind="stable") if np.any(np.diff(ti) < 0) else np.arange(n_rows)
    return arrays["reward"], arrays["rho"], ti, arrays["terminal"], order


def _choose(representation: str, m: int, n: int, one_hot: bool) -> str:
    if representation == "auto":
        if 2 * 8 * m * n * n <= DENSE_MAX_BYTES:
            return "dense"
        return "tabular" if one_hot else "compact"
    return representation


def _build(*, m: int, n: int, tau: np.ndarray, norm: np.ndarray, reward: np.ndarray,
           rho: np.ndarray, gamma: float, terminal: np.ndarray, normalization: str, rep: str,
           phi: np.ndarray | None = None, next_phi: np.ndarray | None = None,
           s: np.ndarray | None = None, sn: np.ndarray | None = None) -> TrajectoryStats:
    """Assemble stats from rows sorted by trajectory (either feature rows or one-hot indices)."""
    offsets = np.concatenate([[0], np.cumsum(tau)]).astype(np.int64)
    owner = np.repeat(np.arange(m, dtype=np.int64), tau)
    rho_store = None if np.all(rho == 1.0) else np.ascontiguousarray(rho)
    rw = norm[owner] * rho
    if s is not None:
        gn = np.where(terminal, 0.0, float(gamma))
        sn = np.where(terminal, s, sn)
        b = np.bincount(owner * n + s, rw * reward, m * n).reshape(m, n)
        stats = TrajectoryStats(
            representation="tabular", tau=tau, b=b, normalization=normalization,
            offsets=offsets, norm=norm, rho=rho_store, s=s.astype(np.int64), sn=sn.astype(np.int64),
            gn=gn)
    else:
        e = phi - float(gamma) * np.where(terminal[:, None], 0.0, next_phi)
        b = np.add.reduceat(phi * (rw * reward)[:, None], offsets[:-1], axis=0)
        stats = TrajectoryStats(
            representation="compact", tau=tau, b=b, normalization=normalization,
            offsets=offsets, norm=norm, rho=rho_store, p=np.ascontiguousarray(phi), e=e)
    if rep == "dense":
        A, b, C = stats.dense()
        return TrajectoryStats.from_dense(A, b, C, tau=tau, normalization=normalization)
    return stats


def _norms(tau: np.ndarray, normalization: str, length_scale: float | None) -> np.ndarray:
    if normalization == "trajectory_mean":
        return 1.0 / tau.astype(np.float64)
    return np.full(len(tau), 1.0 / float(length_scale))  # type: ignore[arg-type]


def trajectory_statistics(phi: np.ndarray, next_phi: np.ndarray, reward: np.ndarray,
                          rho: np.ndarray, traj_index: np.ndarray, n_trajectories: int, *,
                          gamma: float, terminal: np.ndarray,
                          normalization: Normalization = "transition",
                          length_scale: float | None = None,
                          representation: Representation = "auto") -> TrajectoryStats:
    """Per-trajectory statistics from featurised transitions (rows in any order).

    ``phi``, ``next_phi`` (T, n) (the latter ignored on ``terminal`` rows), ``reward``, ``rho``
    (>= 0) and ``traj_index`` (T,), every id in 0..n_trajectories-1 present; ``representation``
    "tabular" needs one-hot phi and next_phi.

    Raises:
        ConfigError: invalid gamma, normalization, length_scale or representation.
        SchemaError, DataError: malformed arrays.
    """
    owner = "trajectory_statistics"
    phi = np.asarray(phi, dtype=np.float64)
    next_phi = np.asarray(next_phi, dtype=np.float64)
    if phi.ndim != 2 or next_phi.shape != phi.shape:
        raise SchemaError(
            f"{owner}: phi and next_phi must both be (T, n); got {phi.shape} and {next_phi.shape}."
        )
    if not (np.all(np.isfinite(phi)) and np.all(np.isfinite(next_phi))):
        raise DataError(f"{owner}: features must be finite.")
    reward, rho, ti, terminal, order = _validate_common(
        owner, phi.shape[0], reward, rho, traj_index, n_trajectories, terminal, gamma,
        normalization, length_scale, representation)
    m, n = int(n_trajectories), phi.shape[1]
    phi, next_phi, reward, rho, ti, terminal = (
        a[order] for a in (phi, next_phi, reward, rho, ti, terminal)
    )
    tau = np.bincount(ti, minlength=m).astype(np.int64)
    norm = _norms(tau, normalization, length_scale)
    oh = oh_next = None
    if representation in ("auto", "tabular"):
        oh = _one_hot_indices(phi)
        oh_next = _one_hot_indices(next_phi)
    one_hot = oh is not None and oh_next is not None and bool(np.all(oh[1]))
    if representation == "tabular" and not one_hot:
        raise DataError(
            f"{owner}: representation='tabular' needs one-hot phi rows and one-hot or zero "
            "next_phi rows; use 'compact' or 'dense' for other features."
        )
    rep = _choose(representation, m, n, one_hot)
    if rep == "tabular":
        terminal = terminal | ~oh_next[1]  # all-zero next features behave as terminal
        return _build(m=m, n=n, tau=tau, norm=norm, reward=reward, rho=rho, gamma=gamma,
                      terminal=terminal, normalization=normalization, rep=rep, s=oh[0],
                      sn=oh_next[0])
    return _build(m=m, n=n, tau=tau, norm=norm, reward=reward, rho=rho, gamma=gamma,
                  terminal=terminal, normalization=normalization, rep=rep, phi=phi,
                  next_phi=next_phi)


def statistics_from_transitions(transitions: Transitions, feature_map: FeatureMap, rho: np.ndarray,
                                *, gamma: float, normalization: Normalization = "transition",
                                length_scale: float | None = None,
                                representation: Representation = "auto") -> TrajectoryStats:
    """Per-trajectory statistics of a :class:`Transitions` batch (sorted by trajectory, dense ids)
    under a feature map, with ``rho`` (T,) importance ratios; other arguments as in
    :func:`trajectory_statistics` ("compact" with a tabular map means "tabular"). Tabular maps never
    materialise one-hot rows."""
    tr = transitions
    if not isinstance(feature_map, TabularFeatures):
        return trajectory_statistics(
            feature_map(tr.state), feature_map(tr.next_state), tr.reward, rho, tr.traj_index,
            tr.n_trajectories, gamma=gamma, terminal=tr.terminal, normalization=normalization,
            length_scale=length_scale, representation=representation)
    owner = "statistics_from_transitions"
    reward, rho_a, ti, terminal, order = _validate_common(
        owner, tr.n_transitions, tr.reward, rho, tr.traj_index, tr.n_trajectories, tr.terminal,
        gamma, normalization, length_scale, representation)
    s = feature_map.indices(tr.state)[order]
    nxt = np.asarray(tr.next_state, dtype=np.float64)[order].copy()
    terminal = terminal[order]
    nxt[terminal] = 0.0  # any valid state (level 0 of every variable); its features are zeroed
    sn = feature_map.indices(nxt)
    m, n = tr.n_trajectories, feature_map.n_features
    tau = np.bincount(ti, minlength=m).astype(np.int64)
    rep = _choose(representation, m, n, True)
    rep = "tabular" if rep == "compact" else rep
    return _build(m=m, n=n, tau=tau, norm=_norms(tau, normalization, length_scale),
                  reward=reward[order], rho=rho_a[order], gamma=gamma, terminal=terminal,
                  normalization=normalization, rep=rep, s=s, sn=sn)


def population_sums(
    batch: Transitions, target: Policy, features: FeatureMap, *, gamma: float,
    length_scale: float | None,
    next_is_following_state: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sums over the trajectories of ``batch`` of A_i, b_i, C_i (population estimates: divide by m),
    weights ``1/length_scale`` (``transition``) or ``1/tau_i`` (``length_scale`` None), ``rho_t =
    target(a_t|s_t) / behavior_prob_t``. ``next_is_following_state``: each step's next state is the
    next row's state (noiseless simulators), so only the last next states are featurised. Products
    run in row blocks of 512 (one tall-skinny ``X^T Y`` is much slower under OpenBLAS threading)."""
    probs = target.probabilities(batch.state)[np.arange(batch.n_transitions), batch.action]
    rho = probs / batch.behavior_prob
    if length_scale is None:
        w = 1.0 / batch.lengths[batch.traj_index]
    else:
        w = np.full(batch.n_transitions, 1.0 / length_scale)
    phi = features(batch.state)
    if next_is_following_state:
        last = batch.offsets[1:] - 1
        nphi = np.empty_like(phi)
        nphi[:-1] = phi[1:]
        nphi[last] = features(batch.next_state[last])
    else:
        nphi = features(batch.next_state)
    nphi[batch.terminal] = 0.0
    wphi = phi * w[:, None]
    n = phi.shape[1]
    A, C = np.zeros((n, n)), np.zeros((n, n))
    b = (wphi * (rho * batch.reward)[:, None]).sum(axis=0)
    for lo in range(0, batch.n_transitions, 512):
        rows = slice(lo, lo + 512)
        A += (wphi[rows] * rho[rows, None]).T @ (phi[rows] - gamma * nphi[rows])
        C += wphi[rows].T @ phi[rows]
    return A, b, C


def population_scale(
    owner: str, normalization: str, gamma: float, length_scale: float | None
) -> tuple[float, float | None]:
    """``(gamma, length_scale for population_sums)``, validated: the scale is None for
    ``trajectory_mean`` (weights ``1/tau_i``) and a positive number for ``transition``.

    Raises:
        ConfigError: an unknown normalisation, gamma outside [0, 1], or a missing or
            non-positive length_scale with ``transition``.
    """
    check_choice(owner, "normalization", normalization, NORMALIZATIONS)
    gamma = check_number(owner, "gamma", gamma, ge=0.0, le=1.0)  # type: ignore[assignment]
    if normalization != "transition":
        return gamma, None
    return gamma, check_number(owner, "length_scale", length_scale, gt=0.0)


def population_statistics(
    simulate: Callable[[int], Transitions], target: Policy, features: FeatureMap, *, gamma: float,
    normalization: str, length_scale: float | None, n_trajectories: int, chunk: int,
    next_is_following_state: bool = False,
    owner: str = "large_sample_statistics") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Population ``A, b, C`` (means over ``n_trajectories``) of behaviour trajectories that
    ``simulate(size)`` draws ``chunk`` at a time, so memory stays bounded by one chunk.

    Each chunk's sums are :func:`population_sums` (``next_is_following_state`` as there).

    Raises:
        ConfigError: a bad normalisation, gamma, length_scale, n_trajectories or chunk.
    """
    gamma, scale = population_scale(owner, normalization, gamma, length_scale)
    m = check_int(owner, "n_trajectories", n_trajectories, ge=1)
    size_max = check_int(owner, "chunk", chunk, ge=1)
    n = features.n_features
    A, b, C = np.zeros((n, n)), np.zeros(n), np.zeros((n, n))
    done = 0
    while done < m:
        size = min(size_max, m - done)
        dA, db, dC = population_sums(simulate(size), target, features, gamma=gamma,
                                     length_scale=scale,
                                     next_is_following_state=next_is_following_state)
        A += dA
        b += db
        C += dC
        done += size
    return A / m, b / m, C / m
