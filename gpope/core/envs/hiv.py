"""HIV treatment: the Adams et al. (2004) model as used by Ernst et al. (2006), vectorised.

Specification (``hiv-v1``):

| index | state (raw, per ml) | observation | public log10 bounds (features) |
|---|---|---|---|
| 0 | T1: uninfected CD4+ T cells | log10 T1 | [3, 7] |
| 1 | T2: uninfected macrophages | log10 T2 | [-1, 4] |
| 2 | T1s: infected CD4+ T cells | log10 T1s | [-3, 6] |
| 3 | T2s: infected macrophages | log10 T2s | [-3, 4] |
| 4 | V: free virus | log10 V | [-1, 7] |
| 5 | E: immune effectors | log10 E | [0, 6] |

Dynamics (raw units, time in days; ``e1`` RTI and ``e2`` PI efficacies)::

    dT1/dt  = l1 - d1 T1 - (1 - e1) k1 V T1
    dT2/dt  = l2 - d2 T2 - (1 - f e1) k2 V T2
    dT1s/dt = (1 - e1) k1 V T1 - delta T1s - m1 E T1s
    dT2s/dt = (1 - f e1) k2 V T2 - delta T2s - m2 E T2s
    dV/dt   = (1 - e2) NT delta (T1s + T2s) - c V - [(1 - e1) rho1 k1 T1 + (1 - f e1) rho2 k2 T2] V
    dE/dt   = lE + bE I/(I + Kb) E - dE I/(I + Kd) E - deltaE E,   I = T1s + T2s

Parameters: :class:`HIVParams` (defaults = the published table).

- Actions (:data:`ACTIONS`): 0 no drug (e1 = e2 = 0); 1 RTI only (e1 = 0.7); 2 PI only (e2 = 0.3);
  3 both (e1 = 0.7, e2 = 0.3). Drugs are held constant over a 5-day decision interval; the state is
  observed at its end.
- Reward of a step, from the raw state after it: ``r = -(Q V + R1 e1^2 + R2 e2^2 - S E)`` with
  Q = 0.1, R1 = 20000, R2 = 2000 (a parameter: some implementations use 20000), S = 1000. About
  +1.76e4 at the unhealthy start, +3.5e8 at the healthy equilibrium.
- Start: the unhealthy steady state rounded, :data:`START` = (163573, 5, 11945, 46, 63919, 24).
  Equilibria: unhealthy :data:`UNHEALTHY_EQUILIBRIUM`, healthy :data:`HEALTHY_EQUILIBRIUM` (both
  locally stable; a good policy moves a patient from the first basin to the second).
- Episode: 200 decisions (1000 days), discount 0.98, no terminal state: the last transition is
  truncated (its next state is kept).
- Observations (the ``state`` columns of :class:`~gpope.core.trajectories.transitions.Transitions`): log10 of
  the six raw states (raw values are floored at 1e-12 before the logarithm; the exact dynamics keep
  every state positive).
- Patient variation (``param_variation = s``, public): every patient draws each of the 20
  parameters independently as ``p * exp(s z)``, z ~ N(0, 1) (median-preserving log-normal); s = 0
  (default) is the published patient. Measurement noise (``obs_noise = sigma``, public): each
  recorded log10 observation gets independent N(0, sigma^2) noise (multiplicative log-normal on raw
  values); the policy acts on the noisy observation, ``next_state`` of a step equals ``state`` of
  the next step, and rewards use the noise-free raw state.
- Features: :func:`hiv_feature_map`, the order-2 Fourier basis over the log10 bounds above with at
  most 2 interacting dimensions: ``1 + 6 * 2 + 15 * 4 = 73`` features.

Integration. :func:`step` and :func:`generate` use DOP853 (scipy's 8(5,3) tableau,
:mod:`gpope.core.envs.hiv_integrator`) with one adaptive step size per patient and purely relative
error control (local rtol :data:`RTOL` = 1e-8 on every component); the model is only moderately
stiff, so the explicit method stays stable by shrinking its steps. Tests check a 5-day step
against scipy's LSODA at tight tolerance to a relative error below 1e-6. The integrator is
compiled with numba; without numba or with ``GPOPE_NO_JIT=1`` the same arithmetic runs in numpy,
vectorised over patients, with the same result. :func:`generate_many` simulates independent data
sets together, exactly as separate :func:`generate` calls would, paying the per-decision work once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from itertools import pairwise
from typing import TYPE_CHECKING, TypedDict, Unpack

import numpy as np

from gpope.core.envs.hiv_integrator import integrate
from gpope.core.trajectories.transitions import Transitions
from gpope.core.validation import check_int, check_number
from gpope.errors import DataError, SchemaError

if TYPE_CHECKING:
    from gpope.core.features import FeatureMap
    from gpope.core.policies import Policy

__all__ = ["ACTIONS", "DT", "GAMMA", "HEALTHY_EQUILIBRIUM", "HIGH", "LOW", "MAX_STEPS", "N_ACTIONS",
           "REFERENCE_STATES", "START", "STATE_NAMES", "UNHEALTHY_EQUILIBRIUM", "VERSION",
           "CohortOptions", "HIVParams", "drug_efficacies", "generate", "generate_many",
           "hiv_feature_map", "initial", "patient_parameters", "reward", "step", "to_observation"]

VERSION = "hiv-v1"
STATE_NAMES: tuple[str, ...] = ("T1", "T2", "T1s", "T2s", "V", "E")
N_ACTIONS = 4
#: Drug efficacies (e1 RTI, e2 PI) of each action index.
ACTIONS: tuple[tuple[float, float], ...] = ((0.0, 0.0), (0.7, 0.0), (0.0, 0.3), (0.7, 0.3))
DT = 5.0
MAX_STEPS = 200
GAMMA = 0.98
START = np.array([163573.0, 5.0, 11945.0, 46.0, 63919.0, 24.0])
UNHEALTHY_EQUILIBRIUM = np.array([163572.75, 4.9954, 11944.94, 45.599, 63918.60, 23.544])
HEALTHY_EQUILIBRIUM = np.array([967838.67, 620.52, 76.012, 6.0918, 415.38, 353108.04])
for _arr in (START, UNHEALTHY_EQUILIBRIUM, HEALTHY_EQUILIBRIUM):
    _arr.setflags(write=False)
#: Public log10 bounds of the observations (feature ranges).
LOW: tuple[float, ...] = (3.0, -1.0, -3.0, -3.0, -1.0, 0.0)
HIGH: tuple[float, ...] = (7.0, 4.0, 6.0, 4.0, 7.0, 6.0)
#: Public reference states (log10 observations): the unhealthy start and the healthy equilibrium.
REFERENCE_STATES = np.log10(np.stack([START, HEALTHY_EQUILIBRIUM]))
REFERENCE_STATES.setflags(write=False)
REWARD_Q, REWARD_R1, REWARD_S = 0.1, 20000.0, 1000.0
_FLOOR = 1e-12
#: Relative tolerance of the vectorised integrator.
RTOL = 1e-8


@dataclass(frozen=True)
class HIVParams:
    """Model parameters (Adams et al. 2004, as tabulated in DOMAINS.md section 3)."""

    l1: float = 1e4
    d1: float = 0.01
    k1: float = 8e-7
    l2: float = 31.98
    d2: float = 0.01
    k2: float = 1e-4
    f: float = 0.34
    delta: float = 0.7
    m1: float = 1e-5
    m2: float = 1e-5
    NT: float = 100.0
    c: float = 13.0
    rho1: float = 1.0
    rho2: float = 1.0
    lE: float = 1.0
    bE: float = 0.3
    Kb: float = 100.0
    dE: float = 0.25
    Kd: float = 500.0
    deltaE: float = 0.1

    def __post_init__(self) -> None:
        for fld in fields(self):
            value = check_number("HIVParams", fld.name, getattr(self, fld.name), gt=0.0)
            object.__setattr__(self, fld.name, value)
        check_number("HIVParams", "f", self.f, gt=0.0, lt=1.0 / 0.7)


PARAM_NAMES: tuple[str, ...] = tuple(f.name for f in fields(HIVParams))


def drug_efficacies(action: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
    """(e1, e2) arrays of the given action indices (0 none, 1 RTI, 2 PI, 3 both)."""
    a = np.asarray(action)
    if a.size and (not np.issubdtype(a.dtype, np.integer) or a.min() < 0 or a.max() >= N_ACTIONS):
        raise DataError(f"HIV actions must be integers 0..3; got {a!r}.")
    table = np.asarray(ACTIONS)
    return table[a, 0], table[a, 1]


def reward(next_state: np.ndarray, action: np.ndarray | int, *, r2: float = 2000.0) -> np.ndarray | float:
    """``-(Q V + R1 e1^2 + R2 e2^2 - S E)`` from raw next state(s) (6,) or (k, 6) and action(s)."""
    x = np.asarray(next_state, dtype=np.float64)
    e1, e2 = drug_efficacies(action)
    r = -(REWARD_Q * x[..., 4] + REWARD_R1 * e1**2 + r2 * e2**2 - REWARD_S * x[..., 5])
    return float(r) if np.ndim(r) == 0 else r


def initial(rng: np.random.Generator | None = None, size: int = 1) -> np.ndarray:
    """(size, 6) raw start states: every patient starts at :data:`START` (deterministic)."""
    del rng
    return np.tile(START, (size, 1))


def patient_parameters(n: int, rng: np.random.Generator, param_variation: float = 0.0,
                       base: HIVParams | None = None) -> dict[str, np.ndarray | float]:
    """Per-patient parameters ``p * exp(s z)``, z ~ N(0, 1) independent per patient and parameter:
    name -> (n,) array, or -> float when ``param_variation == 0`` (then nothing is drawn)."""
    s = check_number("patient_parameters", "param_variation", param_variation, ge=0.0, le=1.0)
    p: dict[str, np.ndarray | float] = asdict(base if base is not None else HIVParams())
    if s == 0.0:
        return p
    z = rng.standard_normal((n, len(PARAM_NAMES)))
    factors = np.exp(s * z)
    # f e1 must stay below 1: cap f at 1 (e1 <= 0.7).
    out = {name: p[name] * factors[:, i] for i, name in enumerate(PARAM_NAMES)}
    out["f"] = np.minimum(out["f"], 1.0)
    return out


def step(states: np.ndarray, actions: np.ndarray, params: HIVParams | dict | None = None, *,
         r2: float = 2000.0, rtol: float = RTOL) -> tuple[np.ndarray, np.ndarray]:
    """One 5-day interval for every patient at once (vectorised Dormand-Prince): ``(next_states
    (k, 6) raw, rewards (k,))`` of (k, 6) raw states and (k,) actions; ``params`` a
    :class:`HIVParams`, a mapping from :func:`patient_parameters` or None (published table)."""
    x = np.asarray(states, dtype=np.float64)
    a = np.asarray(actions)
    if x.ndim != 2 or x.shape[1] != 6 or a.shape != (x.shape[0],):
        raise SchemaError(f"hiv.step needs states (k, 6) and actions (k,); got {x.shape} and {a.shape}.")
    e1, e2 = drug_efficacies(a)
    if params is None or isinstance(params, HIVParams):
        p = asdict(params if params is not None else HIVParams())
    else:
        p = dict(params)
    nxt = integrate(x.T, e1, e2, p, DT, rtol).T
    return nxt, reward(nxt, a, r2=r2)  # type: ignore[return-value]


def to_observation(raw: np.ndarray) -> np.ndarray:
    """log10 of raw states (floored at 1e-12), any shape."""
    return np.log10(np.maximum(np.asarray(raw, dtype=np.float64), _FLOOR))


def hiv_feature_map(order: int = 2, max_coupling: int | None = 2) -> FeatureMap:
    """Fourier basis over the public log10 bounds :data:`LOW`/:data:`HIGH`.

    The default (order 2, at most 2 interacting dimensions) has ``1 + 6*2 + 15*4 = 73`` features.
    """
    from gpope.core.features import FourierFeatures

    return FourierFeatures(order, LOW, HIGH, max_coupling=max_coupling)


class CohortOptions(TypedDict, total=False):
    """The keywords :func:`generate` passes on to :func:`generate_many` (defaults there;
    documented at :func:`generate`)."""

    n_steps: int
    param_variation: float
    obs_noise: float
    r2: float
    params: HIVParams | None


def generate(n_trajectories: int, rng: np.random.Generator, policy: Policy, *,
             start: np.ndarray | None = None, **options: Unpack[CohortOptions]) -> Transitions:
    """Simulate ``n_trajectories`` patients for ``n_steps`` decisions under ``policy``, all at once.

    Random draws, in order: patient parameters (only if ``param_variation > 0``), the noise of the
    first observation (only if ``obs_noise > 0``), then per decision one uniform per patient for the
    action and the noise of the next observation.

    Options (:class:`CohortOptions`): ``n_steps`` decisions per patient (200; the last one is
    truncated), ``param_variation`` the public log-normal spread s of the per-patient parameters
    in [0, 1] (0), ``obs_noise`` the public std of noise on log10 observations (0), ``r2`` the
    reward weight of the PI drug (2000), ``params`` the base parameters (the published table).
    ``start``: (6,) or (m, 6) raw start states (default :data:`START`).

    Returns:
        :class:`Transitions` with (T, 6) log10 observations, T = m * n_steps, sorted by
        (traj_index, t); ``terminal`` all False, ``truncated`` True on each last step.
    """
    starts = None if start is None else [start]
    return generate_many([n_trajectories], [rng], policy, starts=starts, **options)[0]


def generate_many(sizes: Sequence[int], rngs: Sequence[np.random.Generator], policy: Policy, *,
                  n_steps: int = MAX_STEPS, param_variation: float = 0.0, obs_noise: float = 0.0,
                  r2: float = 2000.0, params: HIVParams | None = None,
                  starts: Sequence[np.ndarray | None] | None = None) -> list[Transitions]:
    """Several independent cohorts simulated as one: the same result as separate calls, faster.

    ``generate_many(sizes, rngs, policy, ...)[g]`` equals ``generate(sizes[g], rngs[g], policy,
    ..., start=starts[g])`` exactly: group ``g`` draws from ``rngs[g]`` only, in the order of
    :func:`generate`, and the integrator treats every patient independently (one adaptive step
    size and error test per patient). ``rngs``: one distinct generator per group; ``starts``: per
    group None (:data:`START`), (6,) or (m, 6) raw start states.
    """
    sizes = [check_int("hiv.generate", "n_trajectories", m, ge=1) for m in sizes]
    rngs = list(rngs)
    if len(rngs) != len(sizes) or not sizes:
        raise SchemaError(f"hiv.generate_many needs one generator per group; got {len(sizes)} sizes "
                          f"and {len(rngs)} generators.")
    if len({id(r) for r in rngs}) != len(rngs):
        raise SchemaError("hiv.generate_many needs a distinct generator per group.")
    starts = [None] * len(sizes) if starts is None else list(starts)
    if len(starts) != len(sizes):
        raise SchemaError(f"hiv.generate_many needs one start per group; got {len(starts)}.")
    n_steps = check_int("hiv.generate", "n_steps", n_steps, ge=1)
    sigma = check_number("hiv.generate", "obs_noise", obs_noise, ge=0.0)
    check_number("hiv.generate", "r2", r2, ge=0.0)
    if policy.n_actions != N_ACTIONS:
        raise SchemaError(f"An HIV policy needs 4 actions; got {policy.n_actions}.")
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    groups = [slice(int(lo), int(hi)) for lo, hi in pairwise(bounds)]
    total = int(bounds[-1])
    per_group = [patient_parameters(m, rng, param_variation, params) for m, rng in zip(sizes, rngs, strict=True)]
    p: dict = {}
    for name in per_group[0]:
        values = [q[name] for q in per_group]
        if all(not isinstance(v, np.ndarray) for v in values):
            p[name] = values[0]  # identical scalars (no variation)
        else:
            p[name] = np.concatenate([np.broadcast_to(v, (m,)) for v, m in zip(values, sizes, strict=True)])
    raw = np.concatenate([
        np.broadcast_to(START if st is None else np.asarray(st, dtype=np.float64), (m, 6))
        for st, m in zip(starts, sizes, strict=True)
    ]).copy()

    def observe(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        obs = to_observation(x)
        return obs + sigma * rng.standard_normal(obs.shape) if sigma > 0 else obs

    states = np.empty((n_steps + 1, total, 6))
    for g, rng in zip(groups, rngs, strict=True):
        states[0, g] = observe(raw[g], rng)
    actions = np.empty((n_steps, total), dtype=np.int64)
    probs = np.empty((n_steps, total))
    rewards = np.empty((n_steps, total))
    from gpope.core.policies import sample_actions

    for k in range(n_steps):
        for g, rng in zip(groups, rngs, strict=True):
            actions[k, g], probs[k, g] = sample_actions(policy, states[k, g], rng)
        e1, e2 = drug_efficacies(actions[k])
        raw = integrate(raw.T, e1, e2, p, DT, RTOL).T
        rewards[k] = reward(raw, actions[k], r2=r2)
        for g, rng in zip(groups, rngs, strict=True):
            states[k + 1, g] = observe(raw[g], rng)
    out = []
    for g, m in zip(groups, sizes, strict=True):
        tt = np.tile(np.arange(n_steps, dtype=np.int64), m)
        out.append(Transitions(traj_index=np.repeat(np.arange(m, dtype=np.int64), n_steps), t=tt,
                               state=states[:-1, g].transpose(1, 0, 2).reshape(-1, 6),
                               action=actions[:, g].T.reshape(-1),
                               reward=rewards[:, g].T.reshape(-1),
                               next_state=states[1:, g].transpose(1, 0, 2).reshape(-1, 6),
                               terminal=np.zeros(m * n_steps, dtype=bool),
                               truncated=tt == n_steps - 1, behavior_prob=probs[:, g].T.reshape(-1),
                               n_trajectories=m))
    return out
