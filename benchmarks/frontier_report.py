"""Tables and figures of docs/RESULTS.md's frontier section from docs/results/*.json.

Run: ``.venv/bin/python benchmarks/frontier_report.py`` after ``benchmarks/frontier.py`` (and
``benchmarks/noise_ratios.py``). Prints the markdown tables (pasted into RESULTS.md as printed) and
writes ``docs/figures/frontier_<domain>.png``: one colour per method, one marker per epsilon, each
series joined across m only (never across epsilons).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
FIGURES = ROOT / "docs" / "figures"
MARKERS = {0.1: "o", 1.0: "s", 10.0: "^"}


def _cells(record: dict) -> dict[tuple[int, float], dict[str, float]]:
    cells: dict[tuple[int, float], list[dict]] = {}
    for t in record["trials"]:
        cells.setdefault((int(t["m"]), float(t["epsilon"])), []).append(t)
    out = {}
    for key, rows in sorted(cells.items()):
        rel = np.array([r["rel_mspbe"] for r in rows], dtype=float)
        ve = np.array([r["value_error"] for r in rows], dtype=float)
        out[key] = {
            "n": len(rows), "rel_median": float(np.median(rel)),
            "rel_q25": float(np.quantile(rel, 0.25)), "rel_q75": float(np.quantile(rel, 0.75)),
            "ve_median": float(np.median(ve)) if np.isfinite(ve).any() else float("nan"),
            "seconds": float(np.median([r["seconds"] for r in rows])),
            "touched": float(rows[0]["touched"]), "steps": int(rows[0]["steps"]),
            "clip": rows[0]["clip"], "step_size": rows[0]["step_size"],
        }
    return out


def table(domain: str, record: dict) -> str:
    cells = _cells(record)
    lines = [
        f"**{domain}** (public tuning cohort m_pub = {record['public_size']}; "
        f"{record['settings']['passes']:g} passes, N = {record['settings']['iterations']}, "
        "q = passes / N; tuned points: "
        + ", ".join(f"eps {p['epsilon']:g}: clip {p['clip']:g}, step {p['step_size']:g}"
                    for p in record["tuned"]) + ")",
        "",
        "| m | epsilon | trials | relative MSPBE median [IQR] | RMS value error (median) | "
        "touched trajectories (passes) | solver wall time per run |",
        "|---|---|---|---|---|---|---|",
    ]
    for (m, eps), c in cells.items():
        ve = "n/a" if not np.isfinite(c["ve_median"]) else f"{c['ve_median']:.3g}"
        lines.append(
            f"| {m:,} | {eps:g} | {c['n']} | {c['rel_median']:.3g} [{c['rel_q25']:.3g}, "
            f"{c['rel_q75']:.3g}] | {ve} | {c['touched']:.3g} ({c['touched'] / m:.3g}) | "
            f"{c['seconds']:.2f} s |")
    return "\n".join(lines)


def figure(domain: str, record: dict) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = _cells(record)
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for eps, marker in MARKERS.items():
        ms = sorted(m for (m, e) in cells if e == eps)
        if not ms:
            continue
        ys = [cells[(m, eps)]["rel_median"] for m in ms]
        ax.plot(ms, ys, color="tab:blue", marker=marker, linestyle="-",
                label=f"GPOPE operating point, eps {eps:g}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("m (trajectories)")
    ax.set_ylabel("relative MSPBE (median)")
    ax.set_title(f"{domain}: publicly tuned operating point", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    FIGURES.mkdir(parents=True, exist_ok=True)
    path = FIGURES / f"frontier_{domain}.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main() -> None:
    for path in sorted(RESULTS.glob("frontier_*.json")):
        record = json.loads(path.read_text())
        domain = record["domain"]
        if not record["trials"]:
            print(f"{domain}: no trial finished\n")
            continue
        print(table(domain, record))
        print(f"\nfigure: {figure(domain, record).relative_to(ROOT)}\n")
    ratios = RESULTS / "noise_ratios.json"
    if ratios.exists():
        r = json.loads(ratios.read_text())
        for key in ("chain", "hiv"):
            vals = [row["ratio_rdp_over_paper"] for row in r[key]]
            eps = [row["rdp_epsilon_of_paper_sigma"] for row in r[key]]
            print(f"{key}: sigma_RDP / sigma_paper {min(vals):.2f}-{max(vals):.2f}; RDP "
                  f"(replace-one) epsilon of the paper's sigma {min(eps):.3g}-{max(eps):.3g}")


if __name__ == "__main__":
    main()
