"""The documented own-data path as a new user runs it, shared by the from-scratch trials
(``own_data_ward.py``, ``own_data_icu.py``).

An export's columns are renamed to the bronze contract's with the pandas snippet of
docs/OWN_DATA.md, then the installed ``gpope`` runs ``load``, ``ingest``, ``stats``, ``budget set``
and ``gpope evaluate --dataset D --spec S --epsilon E --delta D`` without solver flags at each
epsilon, and each release (read back with ``gpope query``) is compared with the trial's truth.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from gpope.core.policy_value_direct import ESTIMANDS

#: The released scalars besides the reference states (rows of latest_release).
QUANTITIES = ("policy_value", "behaviour_value", "policy_contrast")
#: A released row's ``estimand`` text -> its key in ``ESTIMANDS`` (a trial's truth per estimand).
ESTIMAND_KEYS = {text: key for key, text in ESTIMANDS.items()}


def trial_parser(doc: str, *, seed: int) -> argparse.ArgumentParser:
    """The options every trial takes: --out, --patients, --seed, --epsilons, --delta,
    --repeats, --run, --json (a trial adds its own)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the exports and lake")
    parser.add_argument("--patients", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=seed)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 10.0])
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--repeats", type=int, default=1,
                        help="evaluations per epsilon on the same statistics (fresh noise each)")
    parser.add_argument("--run", action="store_true", help="run the documented gpope commands")
    parser.add_argument("--json", type=Path, help="write the measured rows here")
    return parser


def rename(out: Path, columns: dict[str, dict[str, str]], exports: dict[str, str]) -> None:
    """The documented snippet: each export ``exports[table]`` under ``out`` becomes
    ``<table>.parquet`` with its columns renamed by ``columns[table]``."""
    for table, mapping in columns.items():
        pd.read_csv(out / exports[table]).rename(columns=mapping).to_parquet(
            out / f"{table}.parquet")


def gpope(*argv: str) -> str:
    """Run the installed ``gpope`` (the venv's console script) as a user would; its stdout
    (its stderr echoed; a non-zero exit stops the trial)."""
    exe = Path(sys.executable).with_name("gpope")
    done = subprocess.run([str(exe), *argv], capture_output=True, text=True)
    if done.stderr.strip():
        print(done.stderr.strip(), file=sys.stderr)
    if done.returncode != 0:
        raise SystemExit(f"gpope {' '.join(argv)} exited {done.returncode}")
    return done.stdout


def run(out: Path, dataset: str, truth: dict, columns: dict[str, dict[str, str]],
        exports: dict[str, str], epsilons: list[float], delta: float,
        repeats: int = 1) -> list[dict]:
    """The documented commands on the exports under ``out`` (conf.yaml and spec.yaml beside
    them), in a fresh lake ``out/lake``; per evaluate run (``repeats`` per epsilon, fresh noise
    on the same statistics) the errors at ``truth["values"]``'s states, and the released
    scalars with their estimand (the key of ``ESTIMANDS``) and ``truth``'s value of that
    estimand (``truth["estimands"][key]``, else ``truth[quantity]``) where it has one."""
    lake = out / "lake"
    shutil.rmtree(lake, ignore_errors=True)
    rename(out, columns, exports)
    common = ["--dataset", dataset, "--lake", str(lake)]
    conf = ["--conf", str(out / "conf.yaml")]
    spec = ["--spec", str(out / "spec.yaml")]
    gpope("load", *common, *(x for t in columns for x in (f"--{t}", str(out / f"{t}.parquet"))))
    print(gpope("ingest", *common, *conf).strip())
    gpope("stats", *common, *conf, *spec)
    gpope("budget", "set", *common, "--epsilon", str(repeats * sum(epsilons) + 1),
          "--delta", "1e-5")
    states = list(truth["values"])
    span = max(truth["values"].values()) - min(truth["values"].values())
    rows = []
    for eps in [e for e in epsilons for _ in range(repeats)]:
        t0 = time.time()
        print(gpope("evaluate", *common, *conf, *spec, "--epsilon", str(eps),
                    "--delta", str(delta)).strip())
        released = json.loads(gpope("query", "--lake", str(lake), "--json",
                                    "SELECT state, value, lower, upper, estimand FROM latest_release "
                                    f"WHERE dataset = '{dataset}'"))["rows"]
        got = {r["state"]: {**r, "lower": -np.inf if r["lower"] is None else r["lower"],
                            "upper": np.inf if r["upper"] is None else r["upper"]}
               for r in released}   # an unbounded end is stored as null
        err = [abs(got[s]["value"] - truth["values"][s]) for s in states]
        cover = [got[s]["lower"] <= truth["values"][s] <= got[s]["upper"] for s in states]
        finite = [bool(np.isfinite(got[s]["lower"]) and np.isfinite(got[s]["upper"]))
                  for s in states]
        ends = {s: {k: got[s][k] if np.isfinite(got[s][k]) else None for k in ("lower", "upper")}
                for s in states}
        row = {"epsilon": eps, "max_abs_error": max(err), "value_span": span,
               "lstd_error": max(abs(truth["lstd"][s] - truth["values"][s]) for s in states),
               "covered": int(sum(cover)), "finite": int(sum(finite)), "states": len(states),
               "released": {s: {"value": got[s]["value"], **ends[s]} for s in states},
               "seconds": round(time.time() - t0, 1)}
        for q in QUANTITIES:
            if q not in got:
                row[q] = None
                continue
            key = ESTIMAND_KEYS.get(got[q].get("estimand"))
            row[q] = {**{k: got[q][k] for k in ("value", "lower", "upper")}, "estimand": key}
            by_estimand = truth.get("estimands", {})
            if key in by_estimand:
                row[q]["truth"] = by_estimand[key]
            elif q in truth and "estimands" not in truth:
                row[q]["truth"] = truth[q]
        rows.append(row)
    return rows


def estimand_truths(truth: dict, direct: float) -> dict[str, float]:
    """``truth["estimands"]``: the truth of each estimand a released J row can state (the key
    of ``ESTIMANDS``), from the trial's recorded-horizon truths in ``truth`` and ``direct``, the
    direct method's aim (the target's V averaged over admissions, no cap)."""
    return {"direct": direct,
            "direct_contrast": direct - truth["behaviour_value"],
            "identified_set": truth["policy_value"],
            "identified_set_contrast": truth["policy_contrast"],
            "behaviour": truth["behaviour_value"]}


def write_json(path: Path | None, truth: dict, rows: list[dict]) -> None:
    """The trial's command, truth and measured rows as one JSON file (nothing when None)."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"command": " ".join(sys.argv), "truth": truth, "rows": rows},
                               indent=1))
