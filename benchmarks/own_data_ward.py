"""A new user's trial of the own-data path on a domain gpope never saw: a hospital ward.

The ward is written here from scratch (not ``gpope.core.envs``): a patient's acuity 0 (ready to
leave) .. 7 (critical) is charted before each ward round (every 8-16 h); the round decides
``observe``, ``medicate`` or ``icu`` with a logged clinician probability; acuity then drifts by
-2..2 (treatment shifts the drift down) or the stay ends: discharge home (reward 1) or death
(reward 0), charted as a ``disposition`` row. Otherwise the round's comfort score is
0.05 (7 - acuity') / 7 minus a treatment cost, clamped at 0 (rewards in [0, 1]). 1 % of patients
per round are transferred out (their record stops; the episode goes on unobserved), and records
run past the dataset's public cap of 40 rounds. Heart rates are charted too (not part of the
state). Times are local (Europe/Berlin) ISO strings with their offset, as an EHR export has them;
the columns have the hospital's names (``mrn``, ``charted_at``, ``item``, ``result``, ...).

The exact values come from the Bellman equations of the ward's own model (numpy solve):
``V(s)`` of the target policy at every acuity; the value over the admission mix
``J_inf = sum_s admit(s) V(s)``, the estimand of J(target) by the direct method; and the
discounted return of a record (0 after a transfer, cut at the 40-round cap), by finite-horizon
dynamic programming: J(behaviour)'s estimand, and J(target)'s where the release is the
identified set. Each released J row is compared with the truth of the estimand it names.
The non-private LSTD beside them is computed here from the simulated episodes (tabular, per-decision
importance ratios, transfers and the cap bootstrapped, as gpope's ingest describes them).

``--run`` then follows docs/OWN_DATA.md with the installed ``gpope`` only: rename the columns
(the documented pandas snippet), ``gpope load``, ``ingest``, ``stats``, ``budget set`` and
``gpope evaluate --dataset D --spec S --epsilon E --delta D`` with no solver flags at each
epsilon, and prints the released values against the truth::

    nice -n 10 .venv/bin/python benchmarks/own_data_ward.py --out /tmp/ward --run --repeats 3 \\
        --json docs/results/own_data_ward.json
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

N_ACUITY = 8
ACTIONS = ("observe", "medicate", "icu")
GAMMA = 0.95
MAX_LENGTH = 40            # the dataset's public cap on rounds (datasets: max_length)
MAX_ROUNDS = 90            # the ward's records run this long at most
TRANSFER_P = 0.01          # per round: transferred out, record stops, episode goes on
WEIGHT_BOUND = 2.0         # public bound of pi / propensity (the largest ratio is 0.5 / 0.3)
BEHAVIOUR = np.array([[.70, .25, .05], [.70, .25, .05], [.40, .50, .10], [.40, .50, .10],
                      [.20, .50, .30], [.20, .50, .30], [.10, .30, .60], [.10, .30, .60]])
TARGET = np.array([[.80, .15, .05], [.80, .15, .05], [.20, .70, .10], [.20, .70, .10],
                   [.10, .40, .50], [.10, .40, .50], [.05, .15, .80], [.05, .15, .80]])
ADMIT = np.array([0, .15, .25, .25, .15, .10, .07, .03])
DRIFT = {0: np.array([.10, .20, .40, .20, .10]),   # acuity change -2..2 per action
         1: np.array([.15, .35, .30, .15, .05]),
         2: np.array([.30, .35, .20, .10, .05])}
COST = np.array([0.0, 0.005, 0.02])
DISCHARGE = np.array([.25, .10, .02, 0, 0, 0, 0, 0])
DEATH = np.array([0, 0, 0, .01, .02, .05, .08, .15])   # halved under icu
HOME, DIED = N_ACUITY, N_ACUITY + 1
#: the hospital's column names -> the bronze contract's (docs/OWN_DATA.md, the rename snippet)
RENAME = {"observations": {"mrn": "patient_id", "charted_at": "time", "item": "variable",
                           "result": "value"},
          "treatments": {"mrn": "patient_id", "ordered_at": "time", "order_code": "action",
                         "p_logged": "propensity"},
          "outcomes": {"mrn": "patient_id", "recorded_at": "time", "comfort_score": "reward"}}
EXPORTS = {"observations": "vitals.csv", "treatments": "orders.csv", "outcomes": "outcomes.csv"}


def model() -> tuple[np.ndarray, np.ndarray]:
    """``P[s, a, s']`` and ``R[s, a, s']`` over s' in 0..7, HOME, DIED."""
    P = np.zeros((N_ACUITY, len(ACTIONS), N_ACUITY + 2))
    R = np.zeros_like(P)
    for s in range(N_ACUITY):
        for a in range(len(ACTIONS)):
            home = DISCHARGE[s] * (1.2 if a == 0 else 1.0)
            died = DEATH[s] * (0.5 if a == 2 else 1.0)
            P[s, a, HOME], P[s, a, DIED] = home, died
            for d, p in zip(range(-2, 3), DRIFT[a], strict=True):
                P[s, a, min(max(s + d, 0), N_ACUITY - 1)] += (1 - home - died) * p
            R[s, a, :N_ACUITY] = np.maximum(
                0.0, 0.05 * (N_ACUITY - 1 - np.arange(N_ACUITY)) / (N_ACUITY - 1) - COST[a])
            R[s, a, HOME] = 1.0
    assert np.allclose(P.sum(-1), 1.0)
    return P, R


def exact_values(policy: np.ndarray, P: np.ndarray, R: np.ndarray) -> np.ndarray:
    """V of ``policy`` at acuity 0..7: the solution of V = r_pi + gamma P_pi V (terminals 0)."""
    r_pi = (policy * (P * R).sum(-1)).sum(1)
    P_pi = np.einsum("sa,sat->st", policy, P[:, :, :N_ACUITY])
    return np.linalg.solve(np.eye(N_ACUITY) - GAMMA * P_pi, r_pi)


def record_value(policy: np.ndarray, P: np.ndarray, R: np.ndarray) -> float:
    """E over admissions of a record's discounted return: 0 after a transfer, cut at the cap."""
    r_pi = (policy * (P * R).sum(-1)).sum(1)
    P_pi = np.einsum("sa,sat->st", policy, P[:, :, :N_ACUITY])
    v = np.zeros(N_ACUITY)
    for _ in range(MAX_LENGTH):
        v = r_pi + GAMMA * (1 - TRANSFER_P) * P_pi @ v
    return float(ADMIT @ v)


def simulate(n: int, rng: np.random.Generator, P: np.ndarray, R: np.ndarray, chart_late: int = 0):
    """``n`` ward stays as the hospital's three exports, and the episodes as (s, a, r, s') lists.

    Acuity is charted 20 minutes before each round, or ``chart_late`` minutes after it (> 0: the
    charting habit that makes every state one step late).
    """
    charted = pd.Timedelta(minutes=chart_late if chart_late > 0 else -20)
    base = pd.Timestamp("2024-01-01", tz="Europe/Berlin")
    vitals, orders, scores, episodes = [], [], [], []
    for i in range(n):
        mrn = 100000 + i
        t = base + pd.Timedelta(minutes=int(rng.integers(0, 365 * 24 * 60)))
        s = int(rng.choice(N_ACUITY, p=ADMIT))
        steps = []
        for _ in range(MAX_ROUNDS):
            vitals.append((mrn, t + charted, "acuity", float(s)))
            vitals.append((mrn, t - pd.Timedelta(minutes=25), "heart_rate",
                           float(np.round(70 + 6 * s + rng.normal(0, 8)))))
            a = int(rng.choice(len(ACTIONS), p=BEHAVIOUR[s]))
            orders.append((mrn, t, ACTIONS[a], BEHAVIOUR[s, a]))
            s2 = int(rng.choice(N_ACUITY + 2, p=P[s, a]))
            gap = pd.Timedelta(minutes=int(rng.integers(8 * 60, 16 * 60)))
            scores.append((mrn, t + gap / 2, R[s, a, s2]))
            steps.append((s, a, R[s, a, s2], s2))
            t = t + gap
            if s2 >= N_ACUITY:
                vitals.append((mrn, t, "disposition", 1.0 if s2 == HOME else 2.0))
                break
            s = s2
            if rng.random() < TRANSFER_P:
                vitals.append((mrn, t - pd.Timedelta(minutes=20), "acuity", float(s)))
                break
        episodes.append(steps)
    frames = {"observations": pd.DataFrame(vitals, columns=["mrn", "charted_at", "item", "result"]),
              "treatments": pd.DataFrame(orders, columns=["mrn", "ordered_at", "order_code",
                                                          "p_logged"]),
              "outcomes": pd.DataFrame(scores, columns=["mrn", "recorded_at", "comfort_score"])}
    for df in frames.values():
        col = df.columns[1]
        df[col] = df[col].map(lambda ts: ts.isoformat())
    return frames, episodes


def lstd(episodes: list) -> np.ndarray:
    """Tabular off-policy LSTD(0) of the target from the episodes, cut at the cap like ingest:
    terminal ends have no successor, transfers and capped records bootstrap from theirs."""
    A = np.zeros((N_ACUITY, N_ACUITY))
    b = np.zeros(N_ACUITY)
    for steps in episodes:
        for s, a, r, s2 in steps[:MAX_LENGTH]:
            rho = TARGET[s, a] / BEHAVIOUR[s, a]
            A[s, s] += rho
            if s2 < N_ACUITY:
                A[s, s2] -= rho * GAMMA
            b[s] += rho * r
    return np.linalg.solve(A, b)


def write_dataset(out: Path, n: int, seed: int, chart_late: int = 0) -> dict:
    """The hospital's exports, conf.yaml, spec.yaml and truth.json under ``out``."""
    P, R = model()
    frames, episodes = simulate(n, np.random.default_rng(seed), P, R, chart_late)
    out.mkdir(parents=True, exist_ok=True)
    for table, frame in frames.items():
        frame.to_csv(out / EXPORTS[table], index=False)
    conf = {"datasets": {"ward": {"variables": ["acuity"], "actions": list(ACTIONS),
                                  "max_length": MAX_LENGTH,
                                  "terminal_variable": "disposition"}}}
    spec = {"name": "ward_escalation", "gamma": GAMMA, "normalization": "transition",
            "length_scale": MAX_LENGTH, "importance_weight_bound": WEIGHT_BOUND,
            "reward_bounds": [0.0, 1.0], "feature_map": {"kind": "tabular", "n_states": N_ACUITY},
            "target_policy": {"kind": "tabular", "probs": TARGET.tolist()},
            "reference_states": {f"acuity{s}": [s] for s in range(N_ACUITY)}}
    (out / "conf.yaml").write_text(yaml.safe_dump(conf, sort_keys=False))
    (out / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    v = exact_values(TARGET, P, R)
    truth = {"values": {f"acuity{s}": float(x) for s, x in enumerate(v)},
             "lstd": {f"acuity{s}": float(x) for s, x in enumerate(lstd(episodes))},
             "policy_value": record_value(TARGET, P, R),
             "behaviour_value": record_value(BEHAVIOUR, P, R),
             "J_inf_target": float(ADMIT @ v),
             "J_inf_behaviour": float(ADMIT @ exact_values(BEHAVIOUR, P, R)),
             "patients": n, "seed": seed,
             "mean_rounds": float(np.mean([len(e) for e in episodes]))}
    truth["policy_contrast"] = truth["policy_value"] - truth["behaviour_value"]
    # what each released J row estimates, by its estimand (gpope.core.policy_value_direct)
    truth["estimands"] = estimand_truths(truth, truth["J_inf_target"])
    (out / "truth.json").write_text(json.dumps(truth, indent=1))
    return truth


def main() -> None:
    parser = trial_parser(__doc__, seed=2026)
    parser.add_argument("--chart-late", type=int, default=0, metavar="MIN",
                        help="chart acuity MIN minutes after each round instead of 20 before")
    parser.add_argument("--no-propensity", action="store_true",
                        help="the orders export without its p_logged column (nothing logged)")
    args = parser.parse_args()
    truth = write_dataset(args.out, args.patients, args.seed, args.chart_late)
    columns = RENAME
    if args.no_propensity:
        orders = args.out / EXPORTS["treatments"]
        pd.read_csv(orders).drop(columns=["p_logged"]).to_csv(orders, index=False)
        columns = {**RENAME, "treatments": {k: v for k, v in RENAME["treatments"].items()
                                            if k != "p_logged"}}
    print(json.dumps({k: truth[k] for k in ("policy_value", "behaviour_value", "J_inf_target",
                                            "J_inf_behaviour", "mean_rounds")}))
    if not args.run:
        return
    rows = run(args.out, "ward", truth, columns, EXPORTS, args.epsilons, args.delta,
               args.repeats)
    print(f"{'eps':>5} {'max abs err':>11} {'LSTD err':>9} {'covered':>8} {'finite':>7} "
          f"{'J(target) [interval]':>30} {'truth':>7}")
    for r in rows:
        j = r["policy_value"]
        jv = ("not released" if j is None
              else f"{j['value']:>8.3f} [{j['lower']:.3f}, {j['upper']:.3f}] {j['truth']:>7.3f}")
        print(f"{r['epsilon']:>5g} {r['max_abs_error']:>11.4f} {r['lstd_error']:>9.4f} "
              f"{r['covered']:>4}/{r['states']:<3} {r['finite']:>3}/{r['states']:<3} {jv}")
    write_json(args.json, truth, rows)


if __name__ == "__main__":
    main()
