"""First-visit Monte Carlo statistics over a finite state set (BASELINES.md section 1.2).

For trajectory ``i`` and a state ``s`` it visits, ``t_i(s)`` is the first time with ``S_t = s``
and ``F_{i,s} = sum_{t >= t_i(s)} gamma^(t - t_i(s)) R_t``. Then ``m_s = #{i : s in x_i}`` and
``Fbar_s = (1/m_s) sum_i F_{i,s}`` (``Fbar_s = 0`` if ``m_s = 0``), as in Balle, Gomrokchi &
Precup (ICML 2016), authors' code ``Evaluator.py``.
"""

from __future__ import annotations

import numpy as np

from gpope.core.baselines._common import as_vector, backward_accumulate, episode_layout
from gpope.core.validation import check_int, check_number
from gpope.errors import DataError, SchemaError

__all__ = ["finite_states", "first_visit_statistics"]

_FINITE_ONLY = ("DP-LSW, DP-LSL and first-visit statistics apply only to finite (tabular or "
                "aggregated) state sets (Balle et al. 2016; BASELINES.md 1.9): states must be "
                "integers 0..N-1 with N given. Discretise or aggregate continuous states first "
                "and define the weights over cells.")


def finite_states(states: object, n_states: int | None) -> tuple[np.ndarray, int]:
    """((T,) int64 states, N) of (T,) state ids (integers, or floats with integral values) in
    ``0..n_states-1``; DataError when N is missing or a state is not such an integer."""
    if n_states is None:
        raise DataError(f"n_states (N) is missing. {_FINITE_ONLY}")
    N = check_int("first_visit_statistics", "n_states", n_states, ge=1)
    arr = np.asarray(states)
    if arr.ndim != 1:
        raise SchemaError(f"'states' must have shape (T,); got {arr.shape}. {_FINITE_ONLY}")
    if not np.issubdtype(arr.dtype, np.integer):
        if not np.issubdtype(arr.dtype, np.floating) or not np.all(np.isfinite(arr)):
            raise DataError(
                f"'states' must hold integer state ids; got dtype {arr.dtype}. {_FINITE_ONLY}"
            )
        if np.any(arr != np.round(arr)):
            raise DataError(f"'states' holds non-integer values. {_FINITE_ONLY}")
    ids = arr.astype(np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= N):
        raise DataError(
            f"'states' must lie in 0..{N - 1}; got {int(ids.min())}..{int(ids.max())}. {_FINITE_ONLY}"
        )
    return ids, N  # type: ignore[return-value]


def first_visit_statistics(states: object, rewards: object, traj_index: object, *,
                           n_states: int | None, gamma: float,
                           clip: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Visit counts ``m_s`` and mean first-visit returns ``Fbar_s`` (BASELINES.md 1.2).

    ``states``, ``rewards`` and ``traj_index`` are (T,) columns, rows grouped by trajectory in
    time order. One backward pass gives the discounted returns (vectorised across trajectories),
    then the earliest occurrence of each (trajectory, state) key is a first visit; with ``clip``
    each first-visit return is clipped to ``[0, clip]`` before averaging (the DP estimators clip
    to the public bound ``F_max``).

    Returns:
        (m_s (N,) int64, Fbar_s (N,) float64), ``Fbar_s = 0`` where ``m_s = 0``.
    """
    ids, N = finite_states(states, n_states)
    T = ids.shape[0]
    gamma_f = check_number("first_visit_statistics", "gamma", gamma, ge=0.0, le=1.0)
    reward_a = as_vector("rewards", rewards, T)
    layout = episode_layout(traj_index, T)
    if T == 0:
        return np.zeros(N, np.int64), np.zeros(N)
    returns = backward_accumulate(reward_a, np.full(T, gamma_f), layout)
    traj = np.asarray(traj_index, dtype=np.int64)
    _, first = np.unique((traj - traj.min()) * N + ids, return_index=True)
    first.sort()
    visit_state, visit_return = ids[first], returns[first]
    if clip is not None:
        visit_return = np.clip(visit_return, 0.0, clip)
    counts = np.bincount(visit_state, minlength=N).astype(np.int64)
    sums = np.bincount(visit_state, weights=visit_return, minlength=N)
    fbar = np.divide(sums, counts, out=np.zeros(N), where=counts > 0)
    return counts, fbar
