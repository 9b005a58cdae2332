"""Probe (issue 11): a GPOPE interval from K disjoint groups of patients (subsample and aggregate).

Each data set (fresh, chain, m patients, ids "p<i>") is split into K groups by the public hash of
the patient id (:func:`gpope.core.intervals.interval_groups`); GPOPE runs once per group with the
operating point ``gpope evaluate`` takes from conf/specs/chain.yaml (poisson sampling, the block's
budget: the same q, N, schedule; sigma calibrated to the FULL (epsilon, delta): parallel
composition, no statistics share) on that group alone, normalised by the public expected group
size q m / K (the numbers in docs/RESULTS.md were measured before that change, with the group's
actual size, which differs from m / K by about 1 %); the released value is the mean of the K
group values and the interval the Student-t interval from their spread
(:func:`gpope.core.intervals.group_interval`). Compared with ONE GPOPE run on all m patients at the
same (epsilon, delta) (the estimate the split replaces).

``--select run``: the tuned (clip, step size) for (m, epsilon) (the run's settings, used by every
group); ``--select group``: the tuned point for (m / K, epsilon) (the group's own size).

Coverage against the estimand (the exact values at s0, s20, s38: the population fixed point of the
tabular features). Result cells rewritten after every data set (``--json``). Fixed seeds: a
measurement, NOT private.

Usage: nice -n 19 python benchmarks/gpope_split_probe.py --m 10000 --eps 1 --groups 5,10,20 \
          --datasets 50 --json /tmp/intervals/split_1e4.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
STATES = np.array([0, 20, 38])


def _subset(tr, keep):
    """Transitions of the trajectories with ``keep[traj_index]``, renumbered densely."""
    from gpope.core.trajectories.transitions import Transitions

    rows = keep[tr.traj_index]
    _, dense = np.unique(tr.traj_index[rows], return_inverse=True)
    return Transitions(
        traj_index=dense.astype(tr.traj_index.dtype), t=tr.t[rows], state=tr.state[rows],
        action=tr.action[rows], reward=tr.reward[rows], next_state=tr.next_state[rows],
        terminal=tr.terminal[rows], truncated=tr.truncated[rows],
        behavior_prob=tr.behavior_prob[rows], n_trajectories=int(dense.max()) + 1)


def _config(spec, *, m_select: int, m: int, eps: float, delta: float):
    from gpope.core.accounting import calibrate_sigma
    from gpope.core.gpope.operating import resolve_budget, resolve_step_offset
    from gpope.core.gpope.solver import GPOPEConfig

    s, _ = spec.evaluation.select(m_select, eps)
    N, q = resolve_budget(m=m, sampling="poisson", passes=s.get("passes"), batch_size=None,
                          iterations=s["iterations"], batch_rate=s.get("batch_rate"))
    sigma = calibrate_sigma(m=m, iterations=N, epsilon=eps, delta=delta, accountant="auto",
                            sampling="poisson", batch_rate=q)
    return GPOPEConfig(
        iterations=N, step_size=s["step_size"], clip=s["clip"], noise_multiplier=sigma,
        delta=delta, sampling="poisson", batch_rate=q, step_schedule=s["step_schedule"],
        step_offset=resolve_step_offset(iterations=N, step_offset=None,
                                        step_offset_fraction=s.get("step_offset_fraction")),
        averaging=s["averaging"], tail_fraction=s["tail_fraction"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=10000)
    parser.add_argument("--eps", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--groups", default="5,10,20")
    parser.add_argument("--datasets", type=int, default=50)
    parser.add_argument("--select", choices=("run", "group"), default="run")
    parser.add_argument("--level", type=float, default=0.95)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--first", type=int, default=0, help="first data set number (resume)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--table", nargs="+", default=None, metavar="JSON",
                        help="pool the per-data-set records of saved --json files (same m, "
                        "epsilon, K; distinct data sets) and print the markdown table")
    args = parser.parse_args(argv)
    if args.table:
        print(markdown_table([c for f in args.table for c in json.loads(Path(f).read_text())]))
        return 0

    from gpope.core.envs import chain as ch
    from gpope.core.gpope.solver import run_gpope
    from gpope.core.intervals import group_interval, interval_groups
    from gpope.core.statistics import statistics_from_transitions
    from gpope.shell.pipeline.jobargs import load_spec

    spec = load_spec(ROOT / "conf/specs/chain.yaml")
    cfg_ch = ch.ChainConfig()
    phi = ch.feature_map(cfg_ch)
    truth = ch.exact_values(cfg_ch)[STATES]
    Ks = [int(k) for k in args.groups.split(",")]
    m = args.m
    pids = np.char.add("p", np.arange(m).astype(str))
    assign = {K: interval_groups(pids, K) for K in Ks}  # public: the ids are the same every data set

    def stats_of(tr):
        return statistics_from_transitions(tr, phi, np.ones(tr.n_transitions), gamma=cfg_ch.gamma,
                                           length_scale=200.0, representation="tabular")

    full_cfg = _config(spec, m_select=m, m=m, eps=args.eps, delta=args.delta)
    rec = {K: {"cov": [], "lb": [], "width": [], "err": [], "single_err": []} for K in Ks}
    single = []
    t0 = time.perf_counter()
    for d in range(args.first, args.first + args.datasets):
        tr = ch.generate(m, np.random.default_rng([args.seed, m, d]), cfg_ch)
        rng = np.random.default_rng([args.seed, m, d, 1])
        th = run_gpope(stats_of(tr), full_cfg, rng)
        single.append(th.theta_avg[STATES] - truth)
        for K in Ks:
            cfg = full_cfg if args.select == "run" else _config(
                spec, m_select=m // K, m=m, eps=args.eps, delta=args.delta)
            vals = []
            # as gpope evaluate: every group normalises by the public expected size m / K
            cfg = dataclasses.replace(cfg, normalizing_size=m / K)
            for g in range(K):
                res = run_gpope(stats_of(_subset(tr, assign[K] == g)), cfg, rng)
                vals.append(res.theta_avg[STATES])
            iv = group_interval(np.array(vals), level=args.level)
            r = rec[K]
            r["cov"].append(((iv.lower <= truth) & (truth <= iv.upper)).tolist())
            r["lb"].append((iv.lower_bound <= truth).tolist())
            r["width"].append((iv.upper - iv.lower).tolist())
            r["err"].append((iv.value - truth).tolist())
        cells = []
        sing = np.abs(np.array(single))
        for K in Ks:
            r = {k: np.array(v) for k, v in rec[K].items() if v}
            cells.append({
                "domain": "chain", "m": m, "epsilon": args.eps, "delta": args.delta, "groups": K,
                "select": args.select, "datasets": d + 1 - args.first, "first": args.first, "quantities": ["V(s0)", "V(s20)", "V(s38)"],
                "coverage": float(r["cov"].mean()), "coverage_per_quantity": r["cov"].mean(0).tolist(),
                "lower_bound_coverage": float(r["lb"].mean()),
                "mean_width": float(r["width"].mean()), "median_width": float(np.median(r["width"])),
                "median_width_per_quantity": np.median(r["width"], 0).tolist(),
                "median_abs_error": float(np.median(np.abs(r["err"]))),
                "median_abs_error_per_quantity": np.median(np.abs(r["err"]), 0).tolist(),
                "mean_error_per_quantity": r["err"].mean(0).tolist(),
                "single_run_median_abs_error": float(np.median(sing)),
                "single_run_median_abs_error_per_quantity": np.median(sing, 0).tolist(),
                "seconds": time.perf_counter() - t0,
                "raw": {k: v for k, v in rec[K].items() if k != "single_err"},
                "raw_single_err": np.array(single).tolist()})
        if args.json:
            Path(args.json).write_text(json.dumps(cells, indent=2))
        print(f"data set {d + 1} ({time.perf_counter() - t0:.0f} s): " + "; ".join(
            f"K={c['groups']} cov {c['coverage']:.3f} width {c['median_width']:.3g} "
            f"err {c['median_abs_error']:.3g}" for c in cells)
            + f"; single run err {cells[0]['single_run_median_abs_error']:.3g}", flush=True)
    return 0


def markdown_table(cells: list[dict]) -> str:
    """One row per (m, epsilon, K): the records of all cells pooled (per-data-set raw records)."""
    pooled: dict[tuple, dict] = {}
    for c in cells:
        key = (c["m"], c["epsilon"], c["groups"], c["select"])
        p = pooled.setdefault(key, {"cov": [], "lb": [], "width": [], "err": [], "single": []})
        for k in ("cov", "lb", "width", "err"):
            p[k] += c["raw"][k]
        p["single"] += c["raw_single_err"][-len(c["raw"]["cov"]):] if c["raw"]["cov"] else []
    rows = ["| m | epsilon | K | data sets (intervals per state) | coverage | coverage s0 / s20 / s38 | "
            "one-sided | median width s0 / s20 / s38 | mean width | mean error s0 / s20 / s38 | "
            "median abs error (split) | median abs error (one run on all m) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (m, eps, K, _sel), p in sorted(pooled.items()):
        cov, lb, w, e, one = (np.array(p[k]) for k in ("cov", "lb", "width", "err", "single"))

        def trio(x, f=".3f"):
            return " / ".join(format(v, f) for v in x)

        rows.append(f"| {m} | {eps:g} | {K} | {len(cov)} | {cov.mean():.3f} | {trio(cov.mean(0), '.2f')} | "
                    f"{lb.mean():.3f} | {trio(np.median(w, 0), '.4f')} | {w.mean():.4f} | "
                    f"{trio(e.mean(0), '+.4f')} | {np.median(np.abs(e)):.4f} | {np.median(np.abs(one)):.4f} |")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
