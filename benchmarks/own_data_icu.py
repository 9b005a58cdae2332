"""A new user's trial of the own-data path with continuous measurements: an ICU sepsis cohort.

The cohort is written here from scratch (not ``gpope.core.envs``): before each 6-hourly decision
a patient's lactate (mmol/L, public range 0.5-10) is drawn from the lab and the mean arterial
pressure (MAP, mmHg, public range 40-110) is charted; the bedside decision is ``none``,
``fluids`` or ``vasopressor``, logged with the probability the unit's protocol gave it (a softmax
in lactate and MAP mixed with 45% uniform: every propensity is at least 0.15). Lactate and MAP
then evolve with the treatment and Gaussian noise, and the stay ends in discharge (reward 1,
likelier at low lactate and normal MAP) or death (reward 0, likelier at high lactate and low
MAP), charted as a ``disposition`` row; between, each decision earns a small stability score
``0.03 (1 - (lactate' - 0.5) / 9.5)`` minus a treatment cost, so every reward lies in [0, 1].
Records run up to 60 decisions; the dataset's public cap is 30. Times are ISO strings with the
hospital's UTC offset (America/New_York), the columns have the export's names.

The target policy is a protocol in the measurements: vasopressor when MAP is below 65, fluids
when lactate is above 4, written as the documented ``softmax`` over a ``linear_q`` on
``constant_identity`` features (``[1, lactate, MAP]`` scaled to [0, 1] by the public ranges).
Its probabilities are computed here independently and checked against gpope's reading of the
spec. The truth is Monte Carlo: ``V`` at five reference patients (rollouts until the stay ends,
no cap), ``J(target)`` and ``J(behaviour)`` (a record's discounted return over at most 30
decisions from the cohort's admission states) and the target's V averaged over admissions (no
cap: what the direct method's J(target) aims at), each with its standard error; each released J
row is compared with the truth of the estimand it names. The non-private
LSTD beside them is computed here from the simulated records on the spec's feature map.

``--run`` then follows docs/OWN_DATA.md with the installed ``gpope`` only (rename the columns,
``gpope load``, ``ingest``, ``stats``, ``budget set`` and ``gpope evaluate --dataset D --spec S
--epsilon E --delta D`` without solver flags at each epsilon) and prints released vs truth::

    nice -n 10 .venv/bin/python benchmarks/own_data_icu.py --out /tmp/icu --run --repeats 3 \\
        --json docs/results/own_data_icu.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from own_data_trial import (  # a script beside this one
    estimand_truths,
    run,
    trial_parser,
    write_json,
)

ACTIONS = ("none", "fluids", "vasopressor")
GAMMA = 0.95
MAX_LENGTH = 30            # public cap on decisions per record (datasets: max_length)
MAX_STEPS = 60             # the unit's records run this long at most
LOW, HIGH = np.array([0.5, 40.0]), np.array([10.0, 110.0])   # public ranges: lactate, MAP
UNIFORM_MIX = 0.45         # behaviour = (1 - mix) softmax + mix uniform: propensities >= 0.15
WEIGHT_BOUND = 7.0         # public bound of pi / propensity: 1 / 0.15 = 6.67
COST = np.array([0.0, 0.005, 0.01])
#: linear action values on [1, x_lactate, x_map] (x scaled to [0, 1]); the target's protocol:
#: vasopressor when MAP < 65 (x_map < 0.357), fluids when lactate > 4 (x_lactate > 0.368)
TARGET_W = np.array([[0.0, 0.0, 0.0], [-0.368 * 12, 12.0, 0.0], [0.357 * 14, 0.0, -14.0]])
BEHAVIOUR_W = np.array([[0.0, 0.0, 0.0], [-1.0, 4.0, 0.0], [1.5, 0.0, -5.0]])
REFERENCE = {"stable": [1.5, 80.0], "hyperlactataemic": [5.0, 75.0], "hypotensive": [2.5, 55.0],
             "shock": [6.0, 52.0], "severe": [9.0, 45.0]}
RENAME = {"observations": {"encounter_id": "patient_id", "obs_time": "time", "code": "variable",
                           "num_value": "value"},
          "treatments": {"encounter_id": "patient_id", "admin_time": "time",
                         "intervention": "action", "logged_prob": "propensity"},
          "outcomes": {"encounter_id": "patient_id", "event_time": "time", "score": "reward"}}
EXPORTS = {"observations": "labs_vitals.csv", "treatments": "interventions.csv",
           "outcomes": "scores.csv"}


def scaled(s: np.ndarray) -> np.ndarray:
    """``[1, x]``, x the state scaled to [0, 1] by the public ranges."""
    x = np.clip((s - LOW) / (HIGH - LOW), 0.0, 1.0)
    return np.concatenate([np.ones((len(s), 1)), x], axis=1)


def softmax_probs(weights: np.ndarray, s: np.ndarray) -> np.ndarray:
    q = scaled(s) @ weights.T
    z = np.exp(q - q.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def target(s: np.ndarray) -> np.ndarray:
    return softmax_probs(TARGET_W, s)


def behaviour(s: np.ndarray) -> np.ndarray:
    return (1 - UNIFORM_MIX) * softmax_probs(BEHAVIOUR_W, s) + UNIFORM_MIX / len(ACTIONS)


def admit(n: int, rng: np.random.Generator) -> np.ndarray:
    """Admission states: lactate log-normal around 3, MAP normal around 68, in the public ranges."""
    lac = np.exp(rng.normal(np.log(3.0), 0.5, n))
    bp = rng.normal(68.0, 10.0, n)
    return np.clip(np.stack([lac, bp], axis=1), LOW, HIGH)


def step(s: np.ndarray, a: np.ndarray, rng: np.random.Generator):
    """One 6-hour step for a batch: next state, reward, and 0 (on) / 1 (discharged) / 2 (died)."""
    lac, bp = s[:, 0], s[:, 1]
    lac2 = (lac + np.select([a == 0, a == 1, a == 2], [0.15, -0.6, -0.2])
            + 0.3 * (bp < 60) + 0.05 * (lac - 2.0) + rng.normal(0, 0.4, len(s)))
    bp2 = (bp + 0.15 * (72.0 - bp) + np.select([a == 0, a == 1, a == 2], [-2.0, 3.0, 8.0])
           + rng.normal(0, 4.0, len(s)))
    s2 = np.clip(np.stack([lac2, bp2], axis=1), LOW, HIGH)
    die = 1 / (1 + np.exp(-(-6.0 + 0.45 * s2[:, 0] + 0.08 * (65.0 - s2[:, 1]))))
    home = np.where((s2[:, 0] < 2.0) & (s2[:, 1] >= 65.0), 0.3, 0.02)
    u = rng.random(len(s))
    end = np.where(u < die, 2, np.where(u < die + home, 1, 0))
    r = np.maximum(0.0, 0.03 * (1 - (s2[:, 0] - LOW[0]) / (HIGH[0] - LOW[0])) - COST[a])
    r = np.where(end == 1, 1.0, np.where(end == 2, 0.0, r))
    return s2, r, end


def sample_actions(p: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return (rng.random((len(p), 1)) > np.cumsum(p, axis=1)).sum(axis=1).clip(0, p.shape[1] - 1)


def rollout_returns(s: np.ndarray, policy, rng: np.random.Generator, horizon: int) -> np.ndarray:
    """Discounted returns of ``policy`` from each row of ``s`` over at most ``horizon`` steps."""
    ret, disc = np.zeros(len(s)), np.ones(len(s))
    alive = np.ones(len(s), dtype=bool)
    for _ in range(horizon):
        idx = np.flatnonzero(alive)
        if not len(idx):
            break
        a = sample_actions(policy(s[idx]), rng)
        s2, r, end = step(s[idx], a, rng)
        ret[idx] += disc[idx] * r
        disc[idx] *= GAMMA
        s[idx] = s2
        alive[idx[end > 0]] = False
    return ret


def mc(values: np.ndarray) -> dict:
    return {"value": float(values.mean()), "se": float(values.std(ddof=1) / np.sqrt(len(values)))}


def truths(rng: np.random.Generator, n_ref: int, n_j: int) -> dict:
    """Monte Carlo V at the reference states (no cap: 400 steps, gamma^400 < 1e-8) and J."""
    out = {"values": {}, "values_se": {}}
    for name, s in REFERENCE.items():
        v = mc(rollout_returns(np.tile(np.array(s, float), (n_ref, 1)), target, rng, 400))
        out["values"][name], out["values_se"][name] = v["value"], v["se"]
    for key, pol in (("policy_value", target), ("behaviour_value", behaviour)):
        j = mc(rollout_returns(admit(n_j, rng), pol, rng, MAX_LENGTH))
        out[key], out[key + "_se"] = j["value"], j["se"]
    out["policy_contrast"] = out["policy_value"] - out["behaviour_value"]
    out["policy_contrast_se"] = float(np.hypot(out["policy_value_se"], out["behaviour_value_se"]))
    # the direct method's J(target) bootstraps capped records: V averaged over admissions, no cap
    j = mc(rollout_returns(admit(n_j, rng), target, rng, 400))
    out["J_inf_target"], out["J_inf_target_se"] = j["value"], j["se"]
    # what each released J row estimates, by its estimand (gpope.core.policy_value_direct); the
    # direct rows' estimand is the feature fit's fixed point, whose approximation error the
    # interval does not cover: the true V averaged over admissions stands beside it
    out["estimands"] = estimand_truths(out, out["J_inf_target"])
    return out


def simulate(n: int, rng: np.random.Generator):
    """``n`` stays as the unit's three exports, and the records as (s, a, r, s', end) arrays."""
    s = admit(n, rng)
    t = (pd.Timestamp("2024-01-01", tz="America/New_York").value // 10**9
         + rng.integers(0, 365 * 86400, n))
    alive = np.ones(n, dtype=bool)
    obs, tx, out, records = [], [], [], []
    for k in range(MAX_STEPS):
        idx = np.flatnonzero(alive)
        if not len(idx):
            break
        tk = t[idx] + k * 6 * 3600
        obs += [(idx, tk - 3600, "lactate", s[idx, 0]), (idx, tk - 600, "map", s[idx, 1])]
        p = behaviour(s[idx])
        a = sample_actions(p, rng)
        tx.append((idx, tk, a, p[np.arange(len(idx)), a]))
        s2, r, end = step(s[idx], a, rng)
        out.append((idx, tk + 3 * 3600, r))
        done = idx[end > 0]
        obs.append((done, tk[end > 0] + 5 * 3600, "disposition", end[end > 0].astype(float)))
        if k < MAX_LENGTH:
            records.append((idx, s[idx].copy(), a, r, s2, end))
        s[idx] = s2
        alive[done] = False

    def when(secs: np.ndarray) -> list[str]:
        return (pd.to_datetime(secs, unit="s", utc=True).tz_convert("America/New_York")
                .map(lambda ts: ts.isoformat()).tolist())

    frames = {
        "observations": pd.DataFrame({
            "encounter_id": np.concatenate([o[0] for o in obs]) + 500000,
            "obs_time": when(np.concatenate([o[1] for o in obs])),
            "code": np.concatenate([[o[2]] * len(o[0]) for o in obs]),
            "num_value": np.round(np.concatenate([np.broadcast_to(o[3], len(o[0])) for o in obs]),
                                  6)}),
        "treatments": pd.DataFrame({
            "encounter_id": np.concatenate([x[0] for x in tx]) + 500000,
            "admin_time": when(np.concatenate([x[1] for x in tx])),
            "intervention": np.array(ACTIONS)[np.concatenate([x[2] for x in tx])],
            "logged_prob": np.concatenate([x[3] for x in tx])}),
        "outcomes": pd.DataFrame({
            "encounter_id": np.concatenate([o[0] for o in out]) + 500000,
            "event_time": when(np.concatenate([o[1] for o in out])),
            "score": np.concatenate([o[2] for o in out])})}
    return frames, records, alive


def lstd(records: list, spec: dict) -> dict:
    """Off-policy LSTD(0) on the spec's feature map (gpope's reading of it: a diagnostic of the
    features' bias): terminal ends have no successor, capped records bootstrap from theirs."""
    from gpope.core.features import feature_map_from_dict

    phi = feature_map_from_dict(spec["feature_map"])
    n = phi.n_features
    A, b = np.zeros((n, n)), np.zeros(n)
    for _, s, a, r, s2, end in records:
        rho = target(s)[np.arange(len(a)), a] / behaviour(s)[np.arange(len(a)), a]
        f, f2 = phi(s), phi(s2) * (end == 0)[:, None]
        A += (rho[:, None] * f).T @ (f - GAMMA * f2)
        b += (rho * r) @ f
    theta = np.linalg.solve(A, b)
    return {k: float(phi(np.array([s], float))[0] @ theta) for k, s in REFERENCE.items()}


def spec_mapping(order: int, coupling: int, name: str = "icu_map_lactate_protocol") -> dict:
    """The unit's spec.yaml: Fourier features of the given order and coupling, the target as
    gpope reads it (softmax of a linear Q on the raw measurements)."""
    q_map = {"kind": "constant_identity", "low": LOW.tolist(), "high": HIGH.tolist()}
    return {"name": name, "gamma": GAMMA, "normalization": "transition",
            "length_scale": MAX_LENGTH, "importance_weight_bound": WEIGHT_BOUND,
            "reward_bounds": [0.0, 1.0],
            "feature_map": {"kind": "fourier", "order": order, "low": LOW.tolist(),
                            "high": HIGH.tolist(), "max_coupling": coupling},
            "target_policy": {"kind": "softmax", "temperature": 1.0,
                              "q": {"kind": "linear_q", "weights": TARGET_W.tolist(),
                                    "feature_map": q_map}},
            "reference_states": REFERENCE}


def write_dataset(out: Path, n: int, seed: int, order: int, coupling: int, n_ref: int,
                  n_j: int) -> dict:
    """The unit's exports, conf.yaml, spec.yaml and truth.json under ``out``."""
    rng = np.random.default_rng(seed)
    frames, records, alive = simulate(n, rng)
    out.mkdir(parents=True, exist_ok=True)
    for table, frame in frames.items():
        frame.to_csv(out / EXPORTS[table], index=False)
    conf = {"datasets": {"icu": {"variables": ["lactate", "map"], "actions": list(ACTIONS),
                                 "max_length": MAX_LENGTH, "terminal_variable": "disposition"}}}
    spec = spec_mapping(order, coupling)
    (out / "conf.yaml").write_text(yaml.safe_dump(conf, sort_keys=False))
    (out / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    from gpope.core.policies import policy_from_dict  # the spec as gpope reads it

    probe = admit(1000, np.random.default_rng(seed + 1))
    gap = float(np.abs(policy_from_dict(spec["target_policy"]).probabilities(probe)
                       - target(probe)).max())
    truth = truths(np.random.default_rng(seed + 2), n_ref, n_j)
    lengths = np.bincount(np.concatenate([r[0] for r in records]), minlength=n)
    truth.update({"lstd": lstd(records, spec), "patients": n, "seed": seed, "fourier_order": order,
                  "max_coupling": coupling,
                  "spec_policy_gap": gap, "mean_decisions": float(lengths.mean()),
                  "still_in_unit_after_60": int(alive.sum()),
                  "ended": int(sum(int((r[5] > 0).sum()) for r in records))})
    (out / "truth.json").write_text(json.dumps(truth, indent=1))
    return truth


def main() -> None:
    parser = trial_parser(__doc__, seed=2027)
    parser.add_argument("--order", type=int, default=3, help="Fourier order of the spec")
    parser.add_argument("--coupling", type=int, default=1, help="the Fourier map's max_coupling")
    parser.add_argument("--mc-reference", type=int, default=40000,
                        help="Monte Carlo rollouts per reference state")
    parser.add_argument("--mc-policy", type=int, default=400000,
                        help="Monte Carlo records per policy value")
    args = parser.parse_args()
    truth = write_dataset(args.out, args.patients, args.seed, args.order, args.coupling,
                          args.mc_reference, args.mc_policy)
    print(json.dumps(truth, indent=1))
    if not args.run:
        return
    rows = run(args.out, "icu", truth, RENAME, EXPORTS, args.epsilons, args.delta,
               repeats=args.repeats)
    print(f"{'eps':>5} {'max abs err':>11} {'/ span':>7} {'LSTD err':>9} {'covered':>8} "
          f"{'finite':>7}")
    for r in rows:
        print(f"{r['epsilon']:>5g} {r['max_abs_error']:>11.4f} "
              f"{r['max_abs_error'] / r['value_span']:>7.3f} {r['lstd_error']:>9.4f} "
              f"{r['covered']:>4}/{r['states']:<3} {r['finite']:>3}/{r['states']:<3}")
        for q in ("policy_value", "behaviour_value", "policy_contrast"):
            j = r[q]
            if j is not None:
                print(f"      {q:<16} {j['value']:>8.4f} [{j['lower']:.4f}, {j['upper']:.4f}]"
                      f"  {j['estimand']}: truth {j.get('truth', float('nan')):.4f}")
    write_json(args.json, truth, rows)


if __name__ == "__main__":
    main()
