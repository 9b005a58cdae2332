"""The shipped specs with and without their publicly tuned ``evaluation:`` block, same data.

For each shipped spec (chain, mountain car, HIV demo) and seed, one simulated cohort goes through
``gpope simulate`` -> ``ingest`` -> ``stats``; then ``gpope evaluate`` runs at each epsilon twice
with no solver flags: with the spec as shipped (its tuned GPOPE settings) and with a copy whose
``evaluation:`` block is removed (the tuning-free default). The error is the max abs error at the
reference states against the truth (chain: closed form; mountain car and HIV: Monte Carlo of the
public simulator), divided by the largest |true value| so domains compare; the script prints the
median per (spec, epsilon) and the ratio untuned / tuned. One Spark session for all.

    nice -n 10 .venv/bin/python benchmarks/own_data_shipped.py --seeds 3 \
        --out docs/results/own_data_shipped.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from own_data import gpope

#: (spec file, domain, patients, episode cap): the operating points the specs were tuned at.
SHIPPED = (
    ("conf/specs/chain.yaml", "chain", 10_000, None),
    ("conf/specs/mountaincar.yaml", "mountaincar", 10_000, None),
    ("conf/specs/hiv_demo.yaml", "hiv", 2_000, 40),
)


def truth_of(spec, domain: str) -> np.ndarray:
    """True values at the spec's reference states from the public simulator."""
    if domain == "chain":
        from gpope.core.envs import chain

        v = chain.exact_values()
        return np.array([v[int(x[0])] for _, x in spec.reference_states])
    rng = np.random.default_rng(0)
    if domain == "mountaincar":
        from gpope.core.envs import mountaincar

        values, _ = mountaincar.monte_carlo_values(spec.target_policy, spec.reference_array(),
                                                   rng, n_rollouts=300, gamma=spec.gamma)
        return np.asarray(values)
    from gpope.core.envs import train_hiv

    values, _ = train_hiv.monte_carlo_values(spec.target_policy, spec.reference_array(), rng,
                                             n_rollouts=1, gamma=spec.gamma, n_steps=200)
    return np.asarray(values)


def summarize(records: list[dict], eps: list[float]) -> list[dict]:
    """Print and return, per (spec, epsilon), the median error of each variant over its cohorts
    (each cohort's error listed), the ratio untuned / tuned and the default's intervals that
    covered the truth and were finite."""
    print(f"\n{'spec':<12} {'eps':>5} {'tuned':>8} {'untuned':>8} {'ratio':>6}  covered finite  "
          "per cohort (tuned | untuned)")
    summary = []
    for name in dict.fromkeys(r["spec"] for r in records):
        for e in eps:
            rs = {v: [r for r in records if (r["spec"], r["epsilon"], r["variant"]) == (name, e, v)]
                  for v in ("tuned", "untuned")}
            med = {v: float(np.median([r["error"] for r in rs[v]])) if rs[v] else None
                   for v in rs}
            ratio = med["untuned"] / med["tuned"] if med["tuned"] and med["untuned"] else None
            row = {"spec": name, "epsilon": e, **med, "ratio": ratio,
                   "cohorts": {v: len(rs[v]) for v in rs},
                   "covered": sum(r["covered"] for r in rs["untuned"]),
                   "finite": sum(r["finite"] for r in rs["untuned"])}
            summary.append(row)

            def fmt(x, w=8):
                return f"{x:>{w}.4f}" if x is not None else f"{'-':>{w}}"

            print(f"{name:<12} {e:>5g} {fmt(med['tuned'])} {fmt(med['untuned'])} {ratio if ratio is not None else float('nan'):>6.2f}"
                  f"  {row['covered']:>3}/{len(rs['untuned'])} {row['finite']:>3}/"
                  f"{len(rs['untuned'])}  "
                  + " ".join(f"{r['error']:.3f}" for r in rs["tuned"]) + " | "
                  + " ".join(f"{r['error']:.3f}" for r in rs["untuned"]))
    return summary


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=3, help="cohorts per spec")
    p.add_argument("--first-seed", type=int, default=0,
                   help="first cohort (cohort k simulates with seed 100 + k); more cohorts of an "
                        "earlier run without repeating it")
    p.add_argument("--epsilons", default="1,10")
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--only", default=None, help="comma-separated domains (default: all)")
    p.add_argument("--variants", default="tuned,untuned",
                   help="which evaluate runs per cohort: the spec as shipped (tuned), without its "
                        "block (untuned), or both")
    p.add_argument("--out", default=None)
    p.add_argument("--summarize", nargs="+", default=None, metavar="JSON",
                   help="run nothing: the summary over the records of earlier runs' --out files "
                        "(cohorts from several runs pooled; a later file's record of the same "
                        "spec, cohort, epsilon and variant replaces an earlier one, e.g. a re-run "
                        "of the default alone); with --out, the pooled records and summary")
    a = p.parse_args(argv)
    if a.summarize:
        pooled = {}
        for f in a.summarize:
            for r in json.loads(Path(f).read_text())["records"]:
                pooled[(r["spec"], r["seed"], float(r["epsilon"]), r["variant"])] = r
        records = list(pooled.values())
        summary = summarize(records, sorted({float(r["epsilon"]) for r in records}))
        if a.out:
            Path(a.out).write_text(json.dumps({"args": vars(a), "summary": summary,
                                               "records": records}, indent=1))
        return 0
    from gpope.shell.pipeline.jobargs import load_spec

    eps = [float(x) for x in a.epsilons.split(",")]
    variants = a.variants.split(",")
    if not set(variants) <= {"tuned", "untuned"}:
        p.error(f"--variants takes tuned, untuned or both; got {a.variants!r}")
    records = []
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="gpope-shipped-") as tmp:
        lake = Path(tmp) / "lake"
        for spec_path, domain, patients, cap in SHIPPED:
            if a.only and domain not in a.only.split(","):
                continue
            spec = load_spec(spec_path)
            stripped = Path(tmp) / f"{domain}_untuned.yaml"
            data = yaml.safe_load(Path(spec_path).read_text())
            data.pop("evaluation", None)
            stripped.write_text(yaml.safe_dump(data, sort_keys=False))
            truth = truth_of(spec, domain)
            scale = float(np.max(np.abs(truth)))
            for seed in range(a.first_seed, a.first_seed + a.seeds):
                ds = f"{domain}_{seed}"
                gpope("simulate", "--domain", domain, "--patients", patients, "--seed", 100 + seed,
                      "--dataset", ds, "--lake", lake, "--no-progress",
                      *(["--steps", cap] if cap else []))
                gpope("ingest", "--dataset", ds, "--domain", domain, "--lake", lake)
                gpope("stats", "--dataset", ds, "--spec", spec_path, "--lake", lake)
                gpope("budget", "set", "--dataset", ds, "--epsilon", 2 * sum(eps) + 1,
                      "--delta", 1e-3, "--lake", lake)
                for e in eps:
                    for variant, path in (("tuned", spec_path), ("untuned", stripped)):
                        if variant not in variants:
                            continue
                        rep = json.loads(gpope("evaluate", "--dataset", ds, "--spec", path,
                                               "--epsilon", e, "--delta", a.delta, "--lake", lake,
                                               "--json"))
                        value = np.array([rep["reference_values"][k] for k, _ in spec.reference_states])
                        iv = rep.get("intervals") or {}
                        lower = np.asarray(iv.get("lower", [-np.inf] * len(value)), dtype=float)
                        upper = np.asarray(iv.get("upper", [np.inf] * len(value)), dtype=float)
                        records.append({
                            "spec": spec.name, "seed": seed, "epsilon": e, "variant": variant,
                            "estimator": rep["estimator"],
                            "error": float(np.max(np.abs(value - truth)) / scale),
                            "covered": bool(np.all((lower <= truth) & (truth <= upper))),
                            "finite": bool(np.all(np.isfinite(lower) & np.isfinite(upper)))})
                print(f"{ds}: " + ", ".join(f"{r['variant']} eps {r['epsilon']:g} "
                      f"{r['error']:.4f}" for r in records[-len(variants) * len(eps):])
                      + f" ({time.time() - t0:.0f} s)", flush=True)
                if a.out:
                    Path(a.out).write_text(json.dumps({"args": vars(a), "records": records},
                                                      indent=1))
    summary = summarize(records, eps)
    if a.out:
        Path(a.out).write_text(json.dumps({"args": vars(a), "summary": summary,
                                           "records": records}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
