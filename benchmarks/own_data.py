"""The own-data benchmark: fresh generated data sets through the documented path, no solver flags.

For each data set (``random_mdp/<seed>`` and ``random_mdp_linear/<seed>`` from ``--first-seed``
on, seeds never used to choose the default), the script runs exactly the commands of
docs/OWN_DATA.md in one process (one Spark session for all): ``gpope simulate --to-files``
(the stand-in for an analyst's files; spec without ``domain`` and without ``evaluation:``) ->
``gpope load`` -> ``gpope ingest`` -> ``gpope stats`` -> ``gpope budget set`` -> ``gpope evaluate
--dataset D --spec S --epsilon E --delta D`` at each epsilon. It reports, over data sets: the
median max abs error at the reference states (values in [0, 1]), the non-private LSTD error on
the same statistics (read from the lake, never released), the interval coverage (every
reference state inside its interval) and the fraction of finite intervals.

    nice -n 10 .venv/bin/python benchmarks/own_data.py --datasets 10 --m 20000 \
        --out docs/results/own_data.json
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import tempfile
import time
from pathlib import Path

import numpy as np


def gpope(*argv: str) -> str:
    """Run one ``gpope`` command in-process; its stdout (fails loudly on a non-zero exit)."""
    from gpope.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main([str(a) for a in argv])
    if rc != 0:
        raise SystemExit(f"gpope {' '.join(map(str, argv))} exited {rc}:\n{out.getvalue()}")
    return out.getvalue()


def lstd_values(lake: Path, dataset: str, spec) -> np.ndarray:
    """The non-private LSTD values of the dataset's statistics (a diagnostic, never released)."""
    from gpope.core.ssp import split_vector, statistics_vectors
    from gpope.shell.query import query

    rows = query(f"SELECT A, b, C FROM {dataset}__trajectory_stats WHERE spec_id = "
                 f"'{spec.spec_id}'", lake=str(lake), operator=True).to_pandas()
    vec = statistics_vectors(np.stack(rows["A"]), np.stack(rows["b"]), np.stack(rows["C"]))
    A, b, _ = split_vector(vec.sum(axis=0), spec.n_features)
    keep = np.abs(np.diag(A)) > 0
    theta = np.zeros(spec.n_features)
    theta[keep] = np.linalg.lstsq(A[np.ix_(keep, keep)], b[keep], rcond=None)[0]
    return spec.reference_values(theta)


def run_dataset(name: str, *, m: int, seed: int, epsilons: list[float], delta: float,
                work: Path) -> list[dict]:
    from gpope.core.untuned.release import value_range
    from gpope.shell.pipeline.jobargs import load_spec

    ds = name.replace("/", "_")
    files = work / ds
    lake = work / "lake"
    gpope("simulate", "--domain", name, "--patients", m, "--seed", seed, "--dataset", ds,
          "--to-files", files, "--no-progress")
    conf, spec_path = files / "conf.yaml", files / "spec.yaml"
    gpope("load", "--dataset", ds, "--lake", lake, *[a for t in ("observations", "treatments",
          "outcomes") for a in (f"--{t}", files / f"{t}.parquet")])  # fmt: skip
    gpope("ingest", "--dataset", ds, "--conf", conf, "--lake", lake)
    gpope("stats", "--dataset", ds, "--conf", conf, "--spec", spec_path, "--lake", lake)
    gpope("budget", "set", "--dataset", ds, "--epsilon", sum(epsilons) + 1, "--delta",
          delta * (len(epsilons) + 1), "--lake", lake)
    spec = load_spec(spec_path)
    truth_map = json.loads((files / "truth.json").read_text())["values"]
    truth = np.array([truth_map[k] for k, _ in spec.reference_states])
    lstd_err = float(np.max(np.abs(lstd_values(lake, ds, spec) - truth)))
    lo, hi = value_range(spec)  # public: what every released value and interval end obeys
    out = []
    for eps in epsilons:
        t0 = time.perf_counter()
        rep = json.loads(gpope("evaluate", "--dataset", ds, "--conf", conf, "--spec", spec_path,
                               "--epsilon", eps, "--delta", delta, "--lake", lake, "--json"))
        iv = rep.get("intervals") or {}
        value = np.array([rep["reference_values"][k] for k, _ in spec.reference_states])
        lower = np.asarray(iv.get("lower", [-np.inf] * len(value)), dtype=float)
        upper = np.asarray(iv.get("upper", [np.inf] * len(value)), dtype=float)
        ends = np.concatenate([value, lower[np.isfinite(lower)], upper[np.isfinite(upper)]])
        out.append({"dataset": name, "seed": seed, "epsilon": eps, "estimator": rep["estimator"],
                    "error": float(np.max(np.abs(value - truth))), "lstd_error": lstd_err,
                    "covered": bool(np.all((lower <= truth) & (truth <= upper))),
                    "finite": bool(np.all(np.isfinite(lower) & np.isfinite(upper))),
                    "in_range": bool(np.all((ends >= lo) & (ends <= hi))),
                    "width": float(np.max(upper - lower)), "values": value.tolist(),
                    "lower": lower.tolist(), "upper": upper.tolist(), "truth": truth.tolist(),
                    "value_range": [lo, hi], "seconds": time.perf_counter() - t0})
    return out


def summarize(records: list[dict], epsilons: list[float]) -> list[dict]:
    rows = []
    for eps in epsilons:
        rs = [r for r in records if r["epsilon"] == eps]
        rows.append({"epsilon": eps, "datasets": len(rs),
                     "median_error": float(np.median([r["error"] for r in rs])),
                     "median_lstd_error": float(np.median([r["lstd_error"] for r in rs])),
                     "coverage": float(np.mean([r["covered"] for r in rs])),
                     "finite": float(np.mean([r["finite"] for r in rs])),
                     "coverage_of_finite": float(np.mean([r["covered"] for r in rs if r["finite"]]
                                                         or [np.nan])),
                     "median_finite_width": float(np.median([r.get("width", np.nan) for r in rs if r["finite"]]
                                                            or [np.nan])),
                     "in_range": float(np.mean([r.get("in_range", np.nan) for r in rs]))})
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", type=int, default=10, help="data sets per feature kind")
    p.add_argument("--first-seed", type=int, default=5000)
    p.add_argument("--m", type=int, default=20000)
    p.add_argument("--epsilons", default="1,10")
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--kinds", default="random_mdp,random_mdp_linear")
    p.add_argument("--out", default=None)
    p.add_argument("--summarize", nargs="+", metavar="JSON",
                   help="print the table of earlier runs' JSON files (merged) and exit")
    a = p.parse_args(argv)
    eps = [float(x) for x in a.epsilons.split(",")]
    if a.summarize:
        merged = [r for f in a.summarize for r in json.loads(Path(f).read_text())["records"]]
        _print_table(summarize(merged, sorted({r["epsilon"] for r in merged})))
        if a.out:
            Path(a.out).write_text(json.dumps({"args": vars(a), "summary": summarize(
                merged, sorted({r["epsilon"] for r in merged})), "records": merged}, indent=1))
        return 0
    records: list[dict] = []
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="gpope-own-data-") as tmp:
        for i in range(a.datasets):
            for kind in a.kinds.split(","):
                name = f"{kind}/{a.first_seed + i}"
                rs = run_dataset(name, m=a.m, seed=a.first_seed + i, epsilons=eps, delta=a.delta,
                                 work=Path(tmp))
                records += rs
                print(f"{name}: " + ", ".join(f"eps {r['epsilon']:g} error {r['error']:.4f} "
                      f"covered {r['covered']} finite {r['finite']}" for r in rs)
                      + f" (lstd {rs[0]['lstd_error']:.4f}; {time.time() - t0:.0f} s)", flush=True)
                if a.out:  # partial results survive an interrupted run
                    Path(a.out).write_text(json.dumps(
                        {"args": vars(a), "summary": summarize(records, eps), "records": records},
                        indent=1))
    _print_table(summarize(records, eps))
    return 0


def _print_table(rows: list[dict]) -> None:
    print(f"\n{'epsilon':>7} {'data sets':>9} {'median error':>12} {'LSTD error':>10} "
          f"{'coverage':>8} {'finite':>6} {'cov|finite':>10} {'width':>7} {'in range':>8}")
    for row in rows:
        print(f"{row['epsilon']:>7g} {row['datasets']:>9} {row['median_error']:>12.4f} "
              f"{row['median_lstd_error']:>10.4f} {row['coverage']:>8.2f} {row['finite']:>6.2f} "
              f"{row['coverage_of_finite']:>10.2f} {row['median_finite_width']:>7.3f} "
              f"{row['in_range']:>8.2f}")


if __name__ == "__main__":
    raise SystemExit(main())
