"""Tables and figures of docs/RESULTS.md's frontier section from docs/results/frontier_*.json.

Run: ``.venv/bin/python benchmarks/frontier_report.py`` after ``benchmarks/frontier.py`` (and
``benchmarks/noise_ratios.py``). Merges every ``frontier_<domain>*.json`` of a domain (a trial
measured twice, same method, m, epsilon and trial index, counts once), prints the markdown tables
(pasted into RESULTS.md as printed) and writes ``docs/figures/frontier_<domain>.png``: one colour
per method, one marker per epsilon, a series joined across m only (never across epsilons).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
FIGURES = ROOT / "docs" / "figures"
MARKERS = {0.1: "o", 1.0: "s", 10.0: "^", float("inf"): "x"}  # inf: non-private (lstd)
COLOURS = {"gpope": "tab:blue", "ssp": "tab:orange", "gpope-40p": "tab:green", "lstd": "tab:gray"}
DOMAINS = ("chain", "mountaincar-on", "mountaincar-off", "hiv", "hiv-demo")


def load(domain: str) -> tuple[list[dict], list[dict]]:
    """(records, trials) of every file of ``domain`` (trials deduplicated)."""
    records, seen, trials = [], set(), []
    paths = sorted(RESULTS.glob(f"frontier_{domain}*.json"), key=lambda q: q.name)
    for path in paths:
        record = json.loads(path.read_text())
        if record.get("domain") != domain:
            continue
        record["file"] = path.name
        records.append(record)
        for t in record["trials"]:
            key = (t.get("method", "gpope"), int(t["m"]), float(t["epsilon"]), int(t["trial"]))
            if key not in seen:
                seen.add(key)
                trials.append({**t, "method": key[0], "file": path.name})
    return records, trials


def cells(trials: list[dict]) -> dict[tuple[str, int, float], dict]:
    groups: dict[tuple[str, int, float], list[dict]] = {}
    for t in trials:
        groups.setdefault((t["method"], int(t["m"]), float(t["epsilon"])), []).append(t)
    out = {}
    for key, rows in sorted(groups.items()):
        rel = np.array([r["rel_mspbe"] for r in rows], dtype=float)
        ve = np.array([r["value_error"] for r in rows], dtype=float)
        out[key] = {
            "n": len(rows), "rel_median": float(np.median(rel)),
            "rel_q25": float(np.quantile(rel, 0.25)), "rel_q75": float(np.quantile(rel, 0.75)),
            "ve_median": float(np.median(ve)) if np.isfinite(ve).any() else float("nan"),
            "ve_q25": float(np.quantile(ve, 0.25)) if np.isfinite(ve).any() else float("nan"),
            "ve_q75": float(np.quantile(ve, 0.75)) if np.isfinite(ve).any() else float("nan"),
            "seconds": float(np.median([r["seconds"] for r in rows])),
            "cpu": (float(np.median([r["cpu_seconds"] for r in rows]))
                    if all("cpu_seconds" in r for r in rows) else float("nan")),
            "touched": float(rows[0]["touched"]), "steps": int(rows[0]["steps"]),
            "clip": rows[0]["clip"], "step_size": rows[0]["step_size"],
            "files": sorted({r["file"] for r in rows}),
        }
    return out


def table(domain: str, records: list[dict], trials: list[dict]) -> str:
    lines = [f"**{domain}**", ""]
    for r in records:
        src = (f"spec {r['spec']} (its evaluation: block, tuned at m_pub = {r['public_size']})"
               if r.get("spec") else f"tuned here on a public cohort of m_pub = {r['public_size']}")
        gp = ", ".join(f"eps {p['epsilon']:g}: clip {p['clip']:g}, step {p['step_size']:g}"
                       for p in r["tuned"])
        s = r["settings"]
        lines.append(
            f"- `{r['file']}`: methods {', '.join(r.get('methods', ['gpope']))}; GPOPE: {src}; "
            f"{s.get('passes', 'n/a')} passes, N = {s.get('iterations', 'n/a')}; tuned points: "
            f"{gp or 'n/a'}"
            + (f"; SSP clip {r['ssp_clip']:.3g} (quantile {r['ssp_quantile']:g} of the norms on a "
               f"public cohort of {r['ssp_public_size']})" if r.get("ssp_clip") else "")
            + (f"; HIV pool of {r['pool']} patients" if r.get("pool") else "")
            + (f"; truth sample {r['truth_size']}" if r.get("truth_size") else "")
            + (f"; tuning {r['tuning_seconds']:.0f} s" if r.get("tuning_seconds") else ""))
    lines += [
        "",
        "| method | m | epsilon | trials | relative MSPBE median [IQR] | RMS value error median "
        "[IQR] | touched trajectories (passes) | wall time per run (median) | CPU time per run "
        "(median) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (method, m, eps), c in cells(trials).items():
        ve = ("n/a" if not np.isfinite(c["ve_median"]) else
              f"{c['ve_median']:.3g} [{c['ve_q25']:.3g}, {c['ve_q75']:.3g}]")
        lines.append(
            f"| {method} | {m:,} | {eps:g} | {c['n']} | {c['rel_median']:.3g} "
            f"[{c['rel_q25']:.3g}, {c['rel_q75']:.3g}] | {ve} | {c['touched']:.3g} "
            f"({c['touched'] / m:.3g}) | {c['seconds']:.2f} s | "
            + ("not recorded" if not np.isfinite(c["cpu"]) else f"{c['cpu']:.2f} s") + " |")
    return "\n".join(lines)


def figure(domain: str, trials: list[dict]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cs = cells(trials)
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    methods = sorted({me for (me, _, _) in cs}, key=lambda x: (x not in COLOURS, x))
    for i, method in enumerate(methods):
        colour = COLOURS.get(method, f"C{i + 3}")
        for eps, marker in MARKERS.items():
            ms = sorted(m for (me, m, e) in cs if me == method and e == eps)
            if not ms:
                continue
            ys = [cs[(method, m, eps)]["rel_median"] for m in ms]
            lo = [cs[(method, m, eps)]["rel_q25"] for m in ms]
            hi = [cs[(method, m, eps)]["rel_q75"] for m in ms]
            ax.errorbar(ms, ys, yerr=[np.subtract(ys, lo), np.subtract(hi, ys)], color=colour,
                        marker=marker, linestyle="-", capsize=3,
                        label=f"{method}, eps {eps:g}" if np.isfinite(eps) else
                        f"{method} (non-private)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("m (trajectories)")
    ax.set_ylabel("relative MSPBE (median, IQR)")
    ax.set_title(f"{domain}: publicly tuned, fresh data per trial", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    FIGURES.mkdir(parents=True, exist_ok=True)
    path = FIGURES / f"frontier_{domain}.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main() -> None:
    for domain in DOMAINS:
        records, trials = load(domain)
        if not trials:
            print(f"{domain}: no trial finished\n")
            continue
        print(table(domain, records, trials))
        print(f"\nfigure: {figure(domain, trials).relative_to(ROOT)}\n")
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
