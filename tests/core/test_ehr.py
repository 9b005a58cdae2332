"""Tests of the EHR event tables: rebuilding the episodes by a plain independent loop (forward
fill, rewards in (decision, next decision]) must give back the simulated transitions."""

from __future__ import annotations

import numpy as np
import pytest

from gpope.core.envs import chain, ehr, hiv, mountaincar
from gpope.core.policies import UniformPolicy
from gpope.errors import ConfigError, SchemaError


def _rebuild(tables, spec):
    """Per patient: lists of (state, action, propensity, reward, next_state, terminal)."""
    obs, tre, out = tables["observations"], tables["treatments"], tables["outcomes"]
    result = {}
    for pid in sorted(set(tre["patient_id"])):
        t_rows = sorted(np.flatnonzero(tre["patient_id"] == pid), key=lambda i: tre["time"][i])
        o_rows = [i for i in np.flatnonzero(obs["patient_id"] == pid)]
        r_rows = [i for i in np.flatnonzero(out["patient_id"] == pid)]
        dec = [tre["time"][i] for i in t_rows]

        def state_at(time, o_rows=o_rows):
            values = []
            for var in spec.variables:
                seen = [(obs["time"][i], obs["value"][i]) for i in o_rows
                        if obs["variable"][i] == var and obs["time"][i] <= time]
                values.append(max(seen, key=lambda tv: tv[0])[1])
            return np.array(values)

        end = max(obs["time"][i] for i in o_rows)
        steps = []
        for k, i in enumerate(t_rows):
            nxt_time = dec[k + 1] if k + 1 < len(dec) else end
            reward = sum(out["reward"][j] for j in r_rows if dec[k] < out["time"][j] <= nxt_time)
            terminal = spec.terminal_variable is not None and any(
                obs["variable"][j] == spec.terminal_variable for j in o_rows
            ) and k == len(dec) - 1
            steps.append((state_at(dec[k]), spec.actions.index(tre["action"][i]), tre["propensity"][i],
                          reward, state_at(nxt_time), terminal))
        result[pid] = steps
    return result


def _check_round_trip(tr, spec, tables):
    rebuilt = _rebuild(tables, spec)
    assert len(rebuilt) == tr.n_trajectories
    for i, (pid, steps) in enumerate(sorted(rebuilt.items())):
        assert pid == f"P{i:06d}"
        rows = np.flatnonzero(tr.traj_index == i)
        assert len(steps) == len(rows)
        for (s, a, p, r, ns, term), row in zip(steps, rows, strict=True):
            np.testing.assert_array_equal(s, tr.state[row])
            assert a == tr.action[row] and p == tr.behavior_prob[row]
            assert r == tr.reward[row]
            assert term == tr.terminal[row]
            if not term:
                np.testing.assert_array_equal(ns, tr.next_state[row])


def test_round_trip_hiv():
    tr = hiv.generate(3, np.random.default_rng(0), UniformPolicy(4), n_steps=5)
    tables = ehr.episodes_to_event_tables(tr, ehr.HIV_SPEC, np.random.default_rng(1))
    _check_round_trip(tr, ehr.HIV_SPEC, tables)
    # Row counts: one treatment and outcome per decision, 6 observations per decision + final state.
    assert len(tables["treatments"]["time"]) == len(tables["outcomes"]["time"]) == 15
    assert len(tables["observations"]["time"]) == (15 + 3) * 6
    assert set(tables["treatments"]["action"]) <= {"none", "rti", "pi", "rti_pi"}
    # Decision k of patient p at start + 5k days exactly (no jitter, no stagger).
    first = tables["treatments"]["time"][tables["treatments"]["patient_id"] == "P000001"]
    expected = np.datetime64("2024-01-01T00:00:00", "us") + np.arange(5) * np.timedelta64(5, "D")
    np.testing.assert_array_equal(first, expected)


def test_round_trip_chain_terminal_with_jitter():
    tr = chain.generate(6, np.random.default_rng(2), chain.ChainConfig(n_states=6, max_steps=8))
    assert tr.terminal.any()
    tables = ehr.episodes_to_event_tables(
        tr, ehr.CHAIN_SPEC, np.random.default_rng(3), jitter=0.45, stagger_days=30.0
    )
    _check_round_trip(tr, ehr.CHAIN_SPEC, tables)
    markers = tables["observations"]["variable"] == "absorbed"
    assert markers.sum() == tr.terminal.sum()


def test_round_trip_mountaincar():
    tr = mountaincar.generate(3, np.random.default_rng(4), UniformPolicy(3), max_steps=20)
    tables = ehr.episodes_to_event_tables(tr, ehr.MOUNTAINCAR_SPEC, np.random.default_rng(5), jitter=0.2)
    _check_round_trip(tr, ehr.MOUNTAINCAR_SPEC, tables)


def test_timestamps_are_ordered():
    tr = hiv.generate(4, np.random.default_rng(0), UniformPolicy(4), n_steps=3)
    tables = ehr.episodes_to_event_tables(
        tr, ehr.HIV_SPEC, np.random.default_rng(1), jitter=0.49, stagger_days=100.0
    )
    tre, out, obs = tables["treatments"], tables["outcomes"], tables["observations"]
    assert tre["time"].dtype == np.dtype("datetime64[us]")
    for pid in set(tre["patient_id"]):
        dec = tre["time"][tre["patient_id"] == pid]
        res = out["time"][out["patient_id"] == pid]
        assert np.all(np.diff(dec) > np.timedelta64(0, "us"))
        # outcome k strictly after decision k and at or before decision k + 1
        assert np.all(res > dec) and np.all(res[:-1] <= dec[1:])
        o = obs["time"][obs["patient_id"] == pid]
        assert np.all(np.diff(o) >= np.timedelta64(0, "us")) and o[-1] > dec[-1]


def test_missingness_and_noise():
    tr = hiv.generate(20, np.random.default_rng(0), UniformPolicy(4), n_steps=10)
    clean = ehr.episodes_to_event_tables(tr, ehr.HIV_SPEC, np.random.default_rng(1))
    noisy = ehr.episodes_to_event_tables(
        tr, ehr.HIV_SPEC, np.random.default_rng(1), missing_prob=0.3, noise=0.1
    )
    n_clean, n_noisy = len(clean["observations"]["value"]), len(noisy["observations"]["value"])
    assert abs(n_noisy / n_clean - 0.7) < 0.05
    assert len(noisy["treatments"]["time"]) == len(clean["treatments"]["time"])
    assert not np.array_equal(np.sort(noisy["observations"]["value"])[:10], np.sort(clean["observations"]["value"])[:10])


def test_inject_bad_rows_counts(inject_bad_rows):
    tr = hiv.generate(3, np.random.default_rng(0), UniformPolicy(4), n_steps=4)
    clean = ehr.episodes_to_event_tables(tr, ehr.HIV_SPEC, np.random.default_rng(1))
    bad, expected = inject_bad_rows(clean, np.random.default_rng(2), ehr.HIV_SPEC, per_reason=3)
    reasons = {"observations": {"invalid_value", "unknown_variable", "duplicate_row", "no_treatments"},
               "treatments": {"unknown_action", "invalid_propensity", "duplicate_row"},
               "outcomes": {"invalid_value", "no_treatments", "unknown_patient"}}
    for name in clean:
        added = len(bad[name]["time"]) - len(clean[name]["time"])
        assert added == sum(expected[name].values())
        assert set(expected[name]) <= reasons[name]
    tre = bad["treatments"]
    assert np.sum(tre["action"] == "unknown_drug") == 3
    p = tre["propensity"]
    assert np.sum(~((p > 0) & (p <= 1))) == 3
    assert np.sum(bad["observations"]["variable"] == "unconfigured_lab") == 3
    assert np.sum(~np.isfinite(bad["observations"]["value"])) == 3
    assert np.sum(~np.isfinite(bad["outcomes"]["reward"])) == 3
    ghosts = [pid for pid in bad["outcomes"]["patient_id"] if pid.startswith("GHOST")]
    assert len(ghosts) == 3 and not set(ghosts) & set(bad["observations"]["patient_id"])
    assert not set(bad["observations"]["patient_id"]) - set(tre["patient_id"]) - {f"NOTREAT{j}" for j in range(3)}


def test_validation():
    tr = chain.generate(2, np.random.default_rng(0))
    with pytest.raises(SchemaError):
        ehr.episodes_to_event_tables(tr, ehr.HIV_SPEC, np.random.default_rng(0))
    with pytest.raises(ConfigError):
        ehr.episodes_to_event_tables(tr, ehr.CHAIN_SPEC, np.random.default_rng(0), jitter=0.5)
    with pytest.raises(ConfigError):
        ehr.EventTableSpec(variables=("a", "a"), actions=("x",))
