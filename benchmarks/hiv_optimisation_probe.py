"""HIV 200-decision probe (issue 10): is the 0.40 optimisation-limited (non-private GTD2 with the same N and
passes is also near 0.4) or clip/privacy-limited? One cohort of 3000 drawn with replacement from
the cached pool (the frontier's trial 0 data), fresh noise per run.

Run (after ``benchmarks/frontier.py hiv --pool 3000`` has cached the pool)::

    PYTHONPATH=. .venv/bin/python benchmarks/hiv_optimisation_probe.py          # N = 2e4 rows
    PYTHONPATH=. .venv/bin/python benchmarks/hiv_optimisation_probe.py --long   # N = 2e5 rows

Output: docs/results/hiv_optimisation_probe.json (``--long``: ..._200k.json).
"""

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from frontier import PoolProblem, hiv_pool

from gpope.core.accounting import calibrate_sigma
from gpope.core.experiments.common import seed_seq
from gpope.core.gpope.operating import resolve_step_offset
from gpope.core.gpope.solver import GPOPEConfig, run_gpope_trials

LONG = "--long" in sys.argv

pool = hiv_pool(3000, 100, Path("/tmp/utility/hiv_pool"))
truth = (pool["A"].mean(0), pool["b"].mean(0), pool["C"].mean(0))
m = 3000
rng = np.random.default_rng(seed_seq(0, 1, m, 0))
prob = PoolProblem(pool, rng.integers(0, 3000, m), truth)
st = prob.stats("transition")
A, b, C = st.population()
lstd = np.linalg.lstsq(A, b, rcond=None)[0]
out = {
    "lstd_rel_mspbe": float(prob.rel_mspbe(lstd)[0]),
    "lstd_norm": float(np.linalg.norm(lstd)),
    "runs": [],
}
print(out, flush=True)
sig1 = float(
    calibrate_sigma(
        m=m,
        iterations=20000,
        epsilon=1.0,
        delta=1e-5,
        accountant="auto",
        sampling="poisson",
        batch_rate=1e-3,
    )
)


def run(N, passes, clip, sigma, step, reps=2):
    q = passes / N
    cfg = GPOPEConfig(
        iterations=N,
        step_size=step,
        clip=clip,
        noise_multiplier=sigma,
        sampling="poisson",
        batch_rate=q,
        step_schedule="inverse",
        step_offset=resolve_step_offset(iterations=N, step_offset=None, step_offset_fraction=0.1),
        averaging="tail",
        tail_fraction=0.5,
    )
    rels = []
    c0 = time.process_time()
    for r in range(reps):
        with np.errstate(all="ignore"):
            res = run_gpope_trials(st, cfg, np.random.default_rng(seed_seq(9, r, int(step), N)), 1)
        th = np.asarray(res.theta_avg if res.theta_avg is not None else res.theta).reshape(-1)
        rels.append(float(prob.rel_mspbe(th)[0]) if np.isfinite(th).all() else float("inf"))
    row = {
        "N": N,
        "passes": passes,
        "clip": clip,
        "sigma": sigma,
        "step": step,
        "rel_mspbe": rels,
        "cpu": time.process_time() - c0,
    }
    out["runs"].append(row)
    print(row, flush=True)
    (
        Path(__file__).resolve().parents[1]
        / "docs"
        / "results"
        / ("hiv_optimisation_probe_200k.json" if LONG else "hiv_optimisation_probe.json")
    ).write_text(json.dumps(out, indent=1))


if LONG:  # 10x the steps and passes, non-private
    run(200000, 200, None, 0.0, 100.0)
    run(200000, 200, 0.3, 0.0, 1000.0)
else:
    run(20000, 20, 0.3, sig1, 1000)  # the frontier's eps-1 cell (tuned point)
    run(20000, 20, 0.3, 0.0, 1000)  # same clip, no noise
    for step in (1e2, 1e3, 1e4, 1e5, 1e6):  # no clip, no noise: plain GTD2, same N / passes
        run(20000, 20, None, 0.0, step)
    run(200000, 200, None, 0.0, 1e4)  # 10x the steps and passes (diverges at this step)
