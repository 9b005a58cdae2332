"""Noise ratios and true epsilons behind the RESULTS.md corrections (issue 10), from the accountants.

Run: ``.venv/bin/python benchmarks/noise_ratios.py`` (writes docs/results/noise_ratios.json).

* rigorous/paper noise ratio: sigma of the paper's mechanism (uniform sampling, one trajectory per
  step, N = 20,000) calibrated by the rigorous RDP accountant (replace-one adjacency, sensitivity
  2h) divided by the sigma of the paper's closed form, at the experiments' (m, epsilon, delta);
* the true epsilon of the paper-accounted chain curve: epsilon certified by the RDP accountant
  (replace-one) for the sigma the paper's formula gives at its nominal epsilon 0.1.
"""

from __future__ import annotations

import json
from pathlib import Path

from gpope.core.accounting import calibrate_sigma, epsilon_spent

N, DELTA = 20_000, 1e-5
OUT = Path(__file__).resolve().parents[1] / "docs" / "results" / "noise_ratios.json"


def ratio(m: int, eps: float) -> dict[str, float]:
    paper = float(calibrate_sigma(m=m, iterations=N, epsilon=eps, delta=DELTA, accountant="paper",
                                  sampling="uniform"))
    rdp = float(calibrate_sigma(m=m, iterations=N, epsilon=eps, delta=DELTA, accountant="rdp",
                                sampling="uniform"))
    true_eps = float(epsilon_spent(m=m, iterations=N, sigma=paper, delta=DELTA, accountant="rdp",
                                   sampling="uniform"))
    return {"m": m, "epsilon": eps, "sigma_paper": paper, "sigma_rdp": rdp,
            "ratio_rdp_over_paper": rdp / paper, "rdp_epsilon_of_paper_sigma": true_eps}


def main() -> None:
    rows = {"chain": [ratio(m, 0.1) for m in (100_000, 200_000, 300_000, 400_000, 500_000)],
            "hiv": [ratio(m, e) for m in (300, 1000, 3000) for e in (0.1, 1.0, 10.0)],
            "settings": {"iterations": N, "delta": DELTA, "sampling": "uniform",
                         "adjacency": "replace-one (sensitivity 2h)"}}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(rows, indent=1))
    for k in ("chain", "hiv"):
        for r in rows[k]:
            print(k, r)


if __name__ == "__main__":
    main()
