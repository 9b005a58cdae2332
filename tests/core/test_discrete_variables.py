"""Several discrete state variables: the product (tabular) map, the additive one-hot map, the
tabular policy over named states and their public sparse bound, against hand-encoded oracles."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from gpope.core.evaluation.loading import plan_loading, row_bytes, sparse_row_bytes
from gpope.core.features import OneHotFeatures, TabularFeatures, feature_map_from_dict
from gpope.core.policies import importance_ratios, policy_from_dict
from gpope.core.spec import EvaluationSpec
from gpope.core.statistics import statistics_from_transitions
from gpope.core.trajectories.transitions import Transitions
from gpope.errors import ConfigError, DataError

LEVELS = {"lactate": 3, "bp": 4}


def _ward(seed: int = 0, m: int = 60) -> tuple[Transitions, Transitions]:
    """One random ward as two variables (lactate, bp) and hand-encoded as 4 * lactate + bp."""
    rng = np.random.default_rng(seed)
    tau = rng.integers(1, 12, m)
    traj = np.repeat(np.arange(m), tau)
    T = len(traj)
    lac, bp = rng.integers(0, 3, (2, T)), rng.integers(0, 4, (2, T))
    terminal = np.zeros(T, bool)
    terminal[np.cumsum(tau) - 1] = rng.random(m) < 0.5
    common = dict(traj_index=traj, t=np.concatenate([np.arange(k) for k in tau]),
                  action=rng.integers(0, 2, T), reward=rng.random(T), terminal=terminal,
                  truncated=np.zeros(T, bool), behavior_prob=rng.uniform(0.3, 1.0, T),
                  n_trajectories=m)
    two = Transitions(state=np.column_stack([lac[0], bp[0]]).astype(float),
                      next_state=np.column_stack([lac[1], bp[1]]).astype(float), **common)
    one = Transitions(state=(4 * lac[0] + bp[0])[:, None].astype(float),
                      next_state=(4 * lac[1] + bp[1])[:, None].astype(float), **common)
    return two, one


def test_product_map_and_policy_are_the_hand_encoded_arithmetic():
    two, one = _ward()
    rows = np.random.default_rng(1).dirichlet([1.0, 1.0], 12)
    named = {f"lactate={i // 4},bp={i % 4}": list(r) for i, r in enumerate(rows)}
    product = policy_from_dict({"kind": "tabular", "variables": LEVELS, "probs": named})
    coded = policy_from_dict({"kind": "tabular", "probs": rows.tolist()})
    rho2, rho1 = importance_ratios(product, two), importance_ratios(coded, one)
    np.testing.assert_array_equal(rho2, rho1)
    got = statistics_from_transitions(two, TabularFeatures(variables=LEVELS), rho2, gamma=0.9,
                                      length_scale=12.0, representation="dense")
    ref = statistics_from_transitions(one, TabularFeatures(12), rho1, gamma=0.9,
                                      length_scale=12.0, representation="dense")
    for a, b in zip(got.dense(), ref.dense(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_named_reference_states_and_spec_round_trip():
    data = {"name": "ward2", "gamma": 0.9, "length_scale": 12,
            "feature_map": {"kind": "tabular", "variables": LEVELS},
            "target_policy": {"kind": "tabular", "variables": LEVELS,
                              "probs": {"default": [0.5, 0.5], "lactate=2,bp=3": [0.0, 1.0]}},
            "reference_states": {"sick": "lactate=2,bp=3", "well": {"lactate": 0, "bp": 1}}}
    spec = EvaluationSpec.from_mapping(data)
    np.testing.assert_array_equal(spec.reference_array(), [[2, 3], [0, 1]])
    theta = np.arange(12.0)
    np.testing.assert_array_equal(spec.reference_values(theta), [4 * 2 + 3, 1])
    assert EvaluationSpec.from_mapping(spec.to_dict()) == spec
    swapped = dict(data, feature_map={"kind": "tabular", "variables": {"bp": 4, "lactate": 3}})
    with pytest.raises(ConfigError, match="same order"):
        EvaluationSpec.from_mapping(swapped)
    coded = dict(data, feature_map={"kind": "tabular", "n_states": 12},
                 target_policy={"kind": "uniform", "n_actions": 2}, reference_states={"s": [11]})
    assert EvaluationSpec.from_mapping(coded).spec_id != spec.spec_id


@pytest.mark.parametrize(("state", "says"), [
    ("lactat=2,bp=0", "names variable 'lactat', which is not declared"),
    ("lactate=3,bp=0", "lactate=3, outside its declared levels 0..2"),
    ({"lactate": 1.5, "bp": 0}, "lactate=1.5, outside its declared levels 0..2"),
    ("lactate=2", "gives no level for bp"),
    ("lactate", "must name every variable as name=level"),
])
def test_a_bad_named_state_is_one_line(state, says):
    data = {"name": "w", "gamma": 0.9, "length_scale": 5,
            "feature_map": {"kind": "one_hot", "variables": LEVELS},
            "target_policy": {"kind": "uniform", "n_actions": 2}, "reference_states": {"x": state}}
    with pytest.raises(ConfigError, match=re.escape(says)) as err:
        EvaluationSpec.from_mapping(data)
    assert "\n" not in str(err.value) and "reference_states.x" in str(err.value)


def test_named_state_without_declared_variables_says_what_to_declare():
    data = {"name": "w", "gamma": 0.9, "length_scale": 5,
            "feature_map": {"kind": "tabular", "n_states": 3},
            "target_policy": {"kind": "uniform", "n_actions": 2},
            "reference_states": {"x": "lactate=1"}}
    with pytest.raises(ConfigError, match="declare 'variables'"):
        EvaluationSpec.from_mapping(data)


def test_a_policy_missing_states_or_a_data_level_out_of_range_is_refused():
    with pytest.raises(ConfigError, match="no row for 11 state"):
        policy_from_dict({"kind": "tabular", "variables": LEVELS,
                          "probs": {"lactate=0,bp=0": [1.0, 0.0]}})
    with pytest.raises(DataError, match=re.escape("levels 0..3 of variable 'bp' in state column 1")):
        TabularFeatures(variables=LEVELS)(np.array([[0.0, 4.0]]))
    with pytest.raises(ConfigError, match="equal the product"):
        TabularFeatures(n_states=11, variables=LEVELS)


def test_additive_one_hot_against_a_loop_and_its_rank():
    fm = OneHotFeatures(LEVELS)
    grid = np.array(list(itertools.product(range(3), range(4))), dtype=float)
    phi = fm(grid)
    assert fm.n_features == 1 + 2 + 3 == phi.shape[1] and fm.max_active == 3
    for row, (lac, bp) in zip(phi, grid.astype(int), strict=True):
        want = [1.0] + [float(lac == v) for v in (1, 2)] + [float(bp == v) for v in (1, 2, 3)]
        np.testing.assert_array_equal(row, want)
    assert np.linalg.matrix_rank(phi) == fm.n_features  # identified over the grid
    blocks = np.concatenate([np.eye(3)[grid[:, 0].astype(int)],
                             np.eye(4)[grid[:, 1].astype(int)]], axis=1)
    assert np.linalg.matrix_rank(blocks) == 7 - 1  # full blocks: one dependency, so refused
    with pytest.raises(ConfigError, match="not identified"):
        OneHotFeatures(LEVELS, constant=False)
    assert feature_map_from_dict(fm.to_dict()) == fm


@pytest.mark.parametrize("fm", [TabularFeatures(variables=LEVELS), OneHotFeatures(LEVELS)])
def test_sparse_bound_covers_every_trajectorys_nonzeros(fm):
    two, _ = _ward(seed=3)
    stats = statistics_from_transitions(two, fm, np.ones(two.n_transitions), gamma=0.9,
                                        length_scale=12.0, representation="dense")
    A, _, C = stats.dense()
    n, p, L = fm.n_features, fm.max_active, 11
    # the pairs two features share a state in, over every state of the grid: the map's support
    grid = np.array(list(itertools.product(*(range(k) for k in LEVELS.values()))), dtype=float)
    phi = fm(grid)
    assert fm.pair_support == np.count_nonzero(phi.T @ phi)
    a_nz = np.count_nonzero(A.reshape(len(A), -1), axis=1)
    c_nz = np.count_nonzero(C.reshape(len(C), -1), axis=1)
    assert a_nz.max() <= min(2 * p * p * L, n * n)
    assert c_nz.max() <= min(p * p * L, fm.pair_support)
    bound = (sparse_row_bytes(n, active=p, max_length=L, pairs=fm.pair_support)
             - 8 * n - 24) // 12
    assert (a_nz + c_nz).max() <= bound
    assert bound <= (sparse_row_bytes(n, active=p, max_length=L) - 8 * n - 24) // 12


def test_the_chain_at_100000_patients_plans_sparse_from_its_public_bound():
    from gpope.core.envs.registry import get_domain

    fm, cap = TabularFeatures(n_states=40), get_domain("chain").max_steps  # what simulate records
    sparse = sparse_row_bytes(40, active=1, max_length=cap, pairs=fm.pair_support)
    assert 100_000 * row_bytes(40) > 2048 * 2**20 >= 100_000 * sparse
    assert plan_loading(m=100_000, n=40, path="auto", limit_mb=2048, one_hot=True,
                        sparse_bytes=sparse) == "sparse"
    # without the tabular map's diagonal C, the cap's 1,000 steps would stream it
    assert plan_loading(m=100_000, n=40, path="auto", limit_mb=2048, one_hot=True,
                        sparse_bytes=sparse_row_bytes(40, active=1, max_length=cap)) == "stream"
    assert plan_loading(m=100_000, n=40, path="auto", limit_mb=2048, one_hot=True) == "stream"
    assert plan_loading(m=10**6, n=40, path="auto", limit_mb=2048, one_hot=True,
                        sparse_bytes=sparse) == "stream"
