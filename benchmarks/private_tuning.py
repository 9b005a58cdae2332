"""What ``gpope evaluate --tune private`` costs and buys, on simulated data (pure numpy core).

At the same total (epsilon, delta), on fresh evaluation data per trial, compares:

* ``public``: clip and step size grid-searched on a PUBLIC simulated cohort (another seed) at the
  operating point below, one GPOPE run at the full epsilon (what ``gpope tune`` gives a user who
  has a simulator);
* ``private``: ``tune_privately`` on the evaluation data itself (two private quantiles, the SSP
  statistics, K candidate runs; everything inside the same epsilon);
* ``defaults``: the untuned ``evaluation:`` defaults of ``conf/default.yaml`` (what a user with
  real data and no tuning gets).

Relative MSPBE against the domain's ground truth (exact for the chain, a large independent
sample for HIV) and, for the chain, RMS value error. Writes one JSON document (every trial).

    nice -n 10 python benchmarks/private_tuning.py chain --m 100000 --epsilons 0.1,1 \
        --trials 4 --iterations 5000 --batch 100 --out out/private_tuning/chain.json
    python benchmarks/private_tuning.py --summarize out/private_tuning/*.json   # the table
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from gpope.config import load_config
from gpope.core.accounting import calibrate_sigma
from gpope.core.experiments.common import seed_seq
from gpope.core.gpope.solver import GPOPEConfig, run_gpope
from gpope.core.tuning.private import plan_private_tuning, tune_privately
from gpope.jsonable import jsonable

GRIDS = {  # public tuning grids (step, clip): the harness's product grids, trimmed for time
    "chain": ((3e3, 1e4, 3e4, 1e5), (0.003, 0.01, 0.03)),
    "hiv": ((10.0, 1e2, 1e3, 1e4), (0.01, 0.1, 1.0)),
}


def problem(domain: str, m: int, ss: np.random.SeedSequence):
    """(problem, normalisation) of one simulated data set."""
    rng = np.random.default_rng(ss)
    if domain == "chain":
        from gpope.core.experiments import ChainProblem, ChainSettings

        return ChainProblem.simulate(m, rng, ChainSettings())
    from gpope.core.experiments.continuous import HIVSettings, _Domain

    return _Domain("hiv", "hiv", HIVSettings()).problem(m, rng, 0)


def config(N: int, q: float, step: float, clip: float, sigma: float) -> GPOPEConfig:
    return GPOPEConfig(iterations=N, step_size=step, clip=clip, noise_multiplier=sigma,
                       sampling="poisson", batch_rate=q, step_schedule="inverse",
                       step_offset=0.1 * N, averaging="tail")


def metrics(p, theta: np.ndarray) -> dict[str, float]:
    return {"rel_mspbe": float(p.rel_mspbe(theta)[0]), "value_error": float(p.value_error(theta)[0])}


def summarize(paths: list[str]) -> str:
    """The markdown table of RESULTS.md from result files (medians over trials)."""
    lines = ["| domain | m | epsilon | trials | method | GPOPE sigma | runs | median rel. MSPBE "
             "| median value RMS | chosen clip / step (median) | seconds per trial |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for path in paths:
        d = json.loads(Path(path).read_text())
        for eps in sorted({c["epsilon"] for c in d["cells"]}):
            rows = [c for c in d["cells"] if c["epsilon"] == eps]
            pub = d["public_tuned"][str(eps)]
            plan = d["plans"][str(eps)]
            for k, label in (("public", "public tuning (simulator)"),
                             ("private", "--tune private"), ("defaults", "conf defaults")):
                r = np.median([c[k]["rel_mspbe"] for c in rows])
                v = np.median([c[k]["value_error"] for c in rows])
                sec = np.median([c[k]["seconds"] for c in rows])
                if k == "public":
                    sig, runs, chosen = pub["sigma"], 1, f"{pub['clip']:g} / {pub['step_size']:g}"
                elif k == "private":
                    sig, runs = plan["gpope_sigma"], plan["candidates"]
                    chosen = (f"{np.median([c[k]['clip'] for c in rows]):.3g} / "
                              f"{np.median([c[k]['step_size'] for c in rows]):.3g}")
                else:
                    sig, runs = None, 1
                    chosen = f"{d['defaults']['clip']:g} / {d['defaults']['step_size']:g}"
                vtxt = "n/a" if not np.isfinite(v) else f"{v:.3g}"
                stxt = "" if sig is None else f"{sig:.3g}"
                lines.append(f"| {d['domain']} | {d['m']:g} | {eps:g} | {len(rows)} | {label} | "
                             f"{stxt} | {runs} | {r:.3g} | {vtxt} | {chosen} | {sec:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == "--summarize":
        print(summarize(argv[1:]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("domain", choices=("chain", "hiv"))
    ap.add_argument("--m", type=int, required=True)
    ap.add_argument("--epsilons", default="1")
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=5000, help="GPOPE steps N (Poisson)")
    ap.add_argument("--batch", type=float, default=100.0, help="expected batch q m")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--accountant", default="pld", choices=("rdp", "pld"))
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    epsilons = [float(e) for e in a.epsilons.split(",")]
    m, N, q = a.m, a.iterations, min(1.0, a.batch / a.m)
    conf = load_config(Path(__file__).resolve().parents[1] / "conf" / "default.yaml")
    ev = conf.evaluation
    settings = ev.private_tuning
    out: dict = {"domain": a.domain, "m": m, "iterations": N, "batch_rate": q,
                 "delta": a.delta, "trials": a.trials, "seed": a.seed, "accountant": a.accountant,
                 "private_tuning": asdict(settings), "defaults": {
                     "iterations": ev.iterations, "clip": ev.clip, "step_size": ev.step_size,
                     "step_schedule": ev.step_schedule, "averaging": ev.averaging,
                     "batch_rate": ev.batch_rate or 1.0 / m},
                 "command": " ".join(sys.argv), "cells": []}
    t_start = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t_start:7.0f}s] {msg}", flush=True)

    # (a) public tuning on a public cohort (another seed), one grid per epsilon
    pub = problem(a.domain, m, seed_seq(a.seed + 1, 3, m))
    steps, clips = GRIDS[a.domain]
    tuned = {}
    for eps in epsilons:
        sigma = calibrate_sigma(m=m, iterations=N, epsilon=eps, delta=a.delta,
                                accountant=a.accountant, sampling="poisson", batch_rate=q)
        best = (math.inf, None)
        for i, h in enumerate(clips):
            for j, eta in enumerate(steps):
                with np.errstate(all="ignore"):
                    res = run_gpope(pub.stats("transition"), config(N, q, eta, h, sigma),
                                    np.random.default_rng(seed_seq(a.seed + 1, 4, i, j)))
                    s = float(pub.rel_mspbe(res.theta_avg)[0])
                s = s if math.isfinite(s) else math.inf
                if s < best[0]:
                    best = (s, (eta, h))
        tuned[eps] = (best[1], sigma)
        log(f"public tuning eps={eps}: step={best[1][0]:g} clip={best[1][1]:g} (score {best[0]:.3g})")
    out["public_tuned"] = {str(e): {"step_size": v[0][0], "clip": v[0][1], "sigma": v[1]}
                           for e, v in tuned.items()}

    dflt_sigma = {}
    for eps in epsilons:
        dflt_sigma[eps] = calibrate_sigma(
            m=m, iterations=ev.iterations, epsilon=eps, delta=a.delta, accountant=a.accountant,
            sampling="poisson", batch_rate=ev.batch_rate or 1.0 / m)
    plans = {eps: plan_private_tuning(m=m, iterations=N, batch_rate=q, epsilon=eps,
                                      delta=a.delta, settings=settings, accountant=a.accountant)
             for eps in epsilons}
    out["plans"] = {str(e): p.to_dict() for e, p in plans.items()}
    for eps in epsilons:
        log(f"eps={eps}: sigma single run {tuned[eps][1]:.4g}, private-tuning GPOPE sigma "
            f"{plans[eps].gpope_sigma:.4g} ({plans[eps].candidates} runs), defaults sigma "
            f"{dflt_sigma[eps]:.4g}")

    for t in range(a.trials):
        p = problem(a.domain, m, seed_seq(a.seed, 1, m, t))
        st = p.stats("transition")
        for eps in epsilons:
            cell = {"trial": t, "epsilon": eps}
            (eta, h), sigma = tuned[eps]
            g = np.random.default_rng(seed_seq(a.seed, 2, t, int(eps * 1000)))
            g_pub, g_priv, g_def = g.spawn(3)
            t0 = time.perf_counter()
            with np.errstate(all="ignore"):
                res = run_gpope(st, config(N, q, eta, h, sigma), g_pub)
            cell["public"] = {**metrics(p, res.theta_avg), "seconds": time.perf_counter() - t0}
            t0 = time.perf_counter()
            tr = tune_privately(st, config(N, q, 1.0, 1.0, 0.0), plans[eps], settings, g_priv)
            cell["private"] = {
                **metrics(p, tr.theta), "seconds": time.perf_counter() - t0,
                "clip": tr.config.clip, "step_size": tr.config.step_size, "chosen": tr.chosen,
                "candidates": [{"step_size": c.step_size, "score": c.score,
                                **metrics(p, c.theta)} for c in tr.candidates],
                "private_relative_mspbe": tr.private_relative_mspbe,
            }
            t0 = time.perf_counter()
            dcfg = GPOPEConfig(iterations=ev.iterations, step_size=ev.step_size, clip=ev.clip,
                               noise_multiplier=dflt_sigma[eps], sampling="poisson",
                               batch_rate=ev.batch_rate or 1.0 / m,
                               step_schedule=ev.step_schedule, step_offset=ev.step_offset,
                               averaging=ev.averaging)
            with np.errstate(all="ignore"):
                res = run_gpope(st, dcfg, g_def)
            th = res.theta_avg if res.theta_avg is not None else res.theta
            cell["defaults"] = {**metrics(p, th), "seconds": time.perf_counter() - t0}
            out["cells"].append(cell)
            log(f"trial {t} eps={eps}: public {cell['public']['rel_mspbe']:.3g} / "
                f"{cell['public']['value_error']:.3g}, private {cell['private']['rel_mspbe']:.3g} / "
                f"{cell['private']['value_error']:.3g} (chose {tr.chosen}), defaults "
                f"{cell['defaults']['rel_mspbe']:.3g} / {cell['defaults']['value_error']:.3g}")
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(out, indent=1, default=jsonable))
    out["seconds"] = time.perf_counter() - t_start
    Path(a.out).write_text(json.dumps(out, indent=1, default=jsonable))
    for eps in epsilons:
        rows = [c for c in out["cells"] if c["epsilon"] == eps]
        for k in ("public", "private", "defaults"):
            r = np.median([c[k]["rel_mspbe"] for c in rows])
            v = np.median([c[k]["value_error"] for c in rows])
            log(f"eps={eps} {k}: median rel MSPBE {r:.3g}, value RMS {v:.3g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
