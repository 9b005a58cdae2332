"""EHR-style bronze event tables from simulated episodes (docs/ARCHITECTURE.md section 2, DOMAINS.md section 4).

One patient is one episode (trajectory ``i`` -> patient ``f"P{i:06d}"``). Tables are
columnar dicts of numpy arrays (string columns are object arrays, ``time`` is ``datetime64[us]``),
so the shell can turn them into Spark/Arrow tables without pandas:

| table | columns |
|---|---|
| observations | patient_id str, time datetime64[us], variable str, value float64 |
| treatments | patient_id str, time datetime64[us], action str, propensity float64 |
| outcomes | patient_id str, time datetime64[us], reward float64 |

Event layout of patient ``p`` with ``tau`` decisions (interval ``D`` days, :class:`EventTableSpec`):

- decision ``k`` (0..tau-1) at ``d_k = s_p + D (k + u_k)``, ``s_p = start_time + U[0, stagger_days)``
  (0 by default) and timing jitter ``u_k ~ U(-jitter, jitter)``, jitter in [0, 0.5) (public; 0 by
  default), so decisions stay strictly increasing. The end of the record is ``d_tau`` (same rule).
- observations: at each ``d_k``, one row per state variable holding ``state[k, j]`` (exactly the
  value in :class:`~gpope.core.trajectories.transitions.Transitions`, e.g. log10 concentrations for HIV), plus
  the final state ``next_state[tau-1]`` at ``d_tau``; each row independently dropped with
  ``missing_prob`` and perturbed by N(0, noise^2) if configured. Rebuilding the state at a decision
  as the last observation at or before it (forward fill) gives back ``state`` exactly when there is
  no noise and nothing is missing.
- treatments: one row per decision at ``d_k`` with the action's name and the behaviour probability
  as ``propensity``.
- outcomes: the reward of step ``k`` half way from ``d_k`` to ``d_{k+1}`` (the end of record for
  the last step), strictly after the decision and at or before the next one.
- episode end: a terminal episode (``terminal`` on its last step) also gets an observation of the
  spec's ``terminal_variable`` (value 1.0) at ``d_tau``; a truncated episode gets nothing special.

Rows are sorted by (patient, time, variable order).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpope.core.trajectories.transitions import Transitions
from gpope.core.validation import check_int, check_number
from gpope.errors import ConfigError, SchemaError

__all__ = ["CHAIN_SPEC", "HIV_SPEC", "MOUNTAINCAR_SPEC", "EventTableSpec",
           "episodes_to_event_tables"]

_US_PER_DAY = 86_400_000_000


@dataclass(frozen=True)
class EventTableSpec:
    """How a domain's episodes are written as event tables (all public).

    Attributes:
        variables: names of the state columns, in order (d names).
        actions: action vocabulary; action index i is written as ``actions[i]``.
        interval_days: nominal time between decisions, > 0.
        terminal_variable: observation variable marking a terminal episode end (None: none).
    """

    variables: tuple[str, ...]
    actions: tuple[str, ...]
    interval_days: float = 1.0
    terminal_variable: str | None = None

    def __post_init__(self) -> None:
        variables = tuple(self.variables)
        actions = tuple(self.actions)
        for name, values in (("variables", variables), ("actions", actions)):
            if not values or len(set(values)) != len(values) or not all(
                isinstance(v, str) and v for v in values
            ):
                raise ConfigError(f"The {name!r} parameter of EventTableSpec must be a non-empty "
                                  f"tuple of unique, non-empty strings. Got {values!r} instead.")
        if self.terminal_variable is not None and self.terminal_variable in variables:
            raise ConfigError("The 'terminal_variable' parameter of EventTableSpec must not be a "
                              f"state variable. Got {self.terminal_variable!r} instead.")
        object.__setattr__(self, "variables", variables)
        object.__setattr__(self, "actions", actions)
        object.__setattr__(
            self, "interval_days", check_number("EventTableSpec", "interval_days", self.interval_days, gt=0.0)
        )


#: HIV: log10 concentrations per ml (T1, T2, T1s, T2s, V, E), decisions every 5 days.
HIV_SPEC = EventTableSpec(
    variables=("cd4_t_cells", "macrophages", "infected_cd4", "infected_macrophages", "viral_load",
               "immune_effectors"),
    actions=("none", "rti", "pi", "rti_pi"), interval_days=5.0)
#: Chain: the integer stage; terminal on absorption.
CHAIN_SPEC = EventTableSpec(variables=("stage",), actions=("observe",), interval_days=1.0,
                            terminal_variable="absorbed")
#: Mountain car: raw position and velocity; terminal at the goal.
MOUNTAINCAR_SPEC = EventTableSpec(variables=("position", "velocity"),
                                  actions=("left", "none", "right"), interval_days=1.0,
                                  terminal_variable="goal_reached")


def _patient_ids(idx: np.ndarray) -> np.ndarray:
    return np.array([f"P{i:06d}" for i in idx], dtype=object)


def episodes_to_event_tables(transitions: Transitions, spec: EventTableSpec,
                             rng: np.random.Generator, *,
                             start_time: np.datetime64 | str = "2024-01-01T00:00:00",
                             jitter: float = 0.0, stagger_days: float = 0.0,
                             missing_prob: float = 0.0, noise: float = 0.0,
                             first_patient: int = 0) -> dict[str, dict[str, np.ndarray]]:
    """Write episodes as the three bronze tables (the module docstring gives the layout and the
    meaning of ``jitter``, ``stagger_days``, ``missing_prob`` and ``noise``).

    ``rng`` draws stagger, jitter, missingness and noise (nothing when all are 0); patient ids are
    ``f"P{first_patient + traj_index:06d}"`` (a cohort converted in parts: part i starts at the
    number of patients before it).

    Returns:
        ``{"observations": {...}, "treatments": {...}, "outcomes": {...}}`` of equal-length columns.
        Row counts: treatments = outcomes = T; observations = (T + m) d + (terminal episodes) before
        missingness.
    """
    owner = "episodes_to_event_tables"
    jitter = check_number(owner, "jitter", jitter, ge=0.0, lt=0.5)
    stagger_days = check_number(owner, "stagger_days", stagger_days, ge=0.0)
    missing_prob = check_number(owner, "missing_prob", missing_prob, ge=0.0, lt=1.0)
    noise = check_number(owner, "noise", noise, ge=0.0)
    first_patient = check_int(owner, "first_patient", first_patient, ge=0)
    tr = transitions
    d = len(spec.variables)
    if tr.state.shape[1] != d:
        raise SchemaError(f"The spec names {d} variables but the states have {tr.state.shape[1]} columns.")
    if tr.n_transitions and (tr.action.min() < 0 or tr.action.max() >= len(spec.actions)):
        raise SchemaError(f"Actions must lie in 0..{len(spec.actions) - 1} for this spec's vocabulary.")
    try:
        t0 = np.datetime64(start_time, "us")
    except ValueError as exc:
        raise ConfigError(f"The 'start_time' parameter of {owner} must be a timestamp. Got {start_time!r}.") from exc
    m, T = tr.n_trajectories, tr.n_transitions
    offsets = tr.offsets
    lengths = tr.lengths
    # Per patient: tau + 1 event times (decisions and end of record), in days from start_time.
    starts = rng.uniform(0.0, stagger_days, m) if stagger_days > 0 else np.zeros(m)
    slot_traj = np.repeat(np.arange(m), lengths + 1)
    slot_k = np.arange(T + m) - np.repeat(offsets[:-1] + np.arange(m), lengths + 1)
    u = rng.uniform(-jitter, jitter, T + m) if jitter > 0 else np.zeros(T + m)
    days = starts[slot_traj] + spec.interval_days * (slot_k + u)
    times = t0 + np.round(days * _US_PER_DAY).astype("timedelta64[us]")
    is_end = slot_k == lengths[slot_traj]
    dec_times, end_times = times[~is_end], times[is_end]
    # Slot values: the state at each decision, and the final next_state at the end of record.
    last_rows = offsets[1:] - 1
    slot_values = np.empty((T + m, d))
    slot_values[~is_end] = tr.state
    slot_values[is_end] = tr.next_state[last_rows]
    pid_slot = _patient_ids(first_patient + slot_traj)
    obs_pid = np.repeat(pid_slot, d)
    obs_time = np.repeat(times, d)
    obs_var = np.tile(np.array(spec.variables, dtype=object), T + m)
    obs_val = slot_values.reshape(-1).astype(np.float64)
    obs_order = np.tile(np.arange(d), T + m)
    if noise > 0:
        obs_val = obs_val + noise * rng.standard_normal(len(obs_val))
    if missing_prob > 0:
        keep = rng.random(len(obs_val)) >= missing_prob
        obs_pid, obs_time, obs_var, obs_val, obs_order = (
            c[keep] for c in (obs_pid, obs_time, obs_var, obs_val, obs_order)
        )
    terminal_traj = tr.traj_index[last_rows[tr.terminal[last_rows]]] if m else np.zeros(0, dtype=np.int64)
    if spec.terminal_variable is not None and len(terminal_traj):
        obs_pid = np.concatenate([obs_pid, _patient_ids(first_patient + terminal_traj)])
        obs_time = np.concatenate([obs_time, end_times[terminal_traj]])
        obs_var = np.concatenate([obs_var, np.full(len(terminal_traj), spec.terminal_variable, dtype=object)])
        obs_val = np.concatenate([obs_val, np.ones(len(terminal_traj))])
        obs_order = np.concatenate([obs_order, np.full(len(terminal_traj), d)])
    # Observation rows are generated patient by patient in time order; the terminal markers come
    # last, so one stable sort by (patient, time, variable order) suffices.
    order = np.lexsort((obs_order, obs_time, obs_pid.astype(str)))
    observations = {
        "patient_id": obs_pid[order],
        "time": obs_time[order],
        "variable": obs_var[order],
        "value": obs_val[order],
    }
    # Next event after each decision: the next decision or the end of record.
    next_times = times[np.flatnonzero(~is_end) + 1]
    gap = (next_times - dec_times).astype(np.int64)
    out_times = dec_times + np.maximum(np.round(0.5 * gap).astype(np.int64), 1).astype(
        "timedelta64[us]"
    )
    pid_dec = _patient_ids(first_patient + tr.traj_index)
    treatments = {
        "patient_id": pid_dec,
        "time": dec_times,
        "action": np.array(spec.actions, dtype=object)[tr.action],
        "propensity": np.asarray(tr.behavior_prob, dtype=np.float64).copy(),
    }
    outcomes = {
        "patient_id": pid_dec.copy(),
        "time": out_times,
        "reward": np.asarray(tr.reward, dtype=np.float64).copy(),
    }
    return {"observations": observations, "treatments": treatments, "outcomes": outcomes}
