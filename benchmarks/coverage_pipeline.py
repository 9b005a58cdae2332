"""Coverage of every released interval on the documented pipeline path, per domain x epsilon.

Per domain, ``--datasets`` fresh data sets of ``--m`` patients each go through the path
docs/OWN_DATA.md documents, in one process and ONE Spark session, each data set in its own
temporary lake: files -> ``load`` -> ``ingest`` -> ``stats`` -> ``budget set`` -> ``evaluate
--dataset D --spec S --epsilon E --delta D`` at each epsilon with no solver flag (the tuning-free
default and its policy value release), all through :mod:`gpope.api`. Every row the run wrote to
``gold/released_values`` (V at each reference state, ``policy_value``, ``behaviour_value``,
``policy_contrast``) is scored against the truth of the estimand the row states (its
``estimand`` column; :data:`gpope.core.policy_value_direct.ESTIMANDS`). An unbounded interval
covers and counts as not finite.

Domains (each data set a fresh cohort; the truth of every estimand exact unless said):

* ``random_mdp``: generated tabular MDPs ``random_mdp/<seed>`` with 1-3 absorbing terminal states,
  written by ``gpope simulate --to-files`` (:func:`gpope.api.write_cohort_files`), one MDP per
  data set; V the exact value, J by forward recursion over the cap.
* ``random_mdp_linear``: ``random_mdp_linear/<seed>``, linear features in which V is exact; signed
  rewards.
* ``signed_ward``: the generated sepsis-like ward of ``benchmarks/signed_ward_core.py`` (12
  acuity cells, three treatments, discharge +1 and death -1 terminal, gamma 0.95, cap 30), ward
  ``<seed>`` per data set, every cell a reference state.
* ``heavy_tail``: the same ward plus a chronic cell where 5 % of patients are admitted and stay
  long at a cost of -1 a round (cap 60): a few long, costly stays carry most of the value.
* ``ward``: the hospital ward trial of ``benchmarks/own_data_ward.py`` (exports with the
  hospital's own column names renamed by the documented snippet, transfers, cap 40).
* ``ward_outcome``: the same ward trial with ``return_bounds: [0, 2]`` in its spec (the
  design: a comfort score of at most 0.05 a round and one discharge of 1).
* ``icu``: the ICU trial of ``benchmarks/own_data_icu.py`` (lactate and MAP, Fourier order 3);
  its V rows and direct J(target) estimate the fit's fixed point, computed once by LSTD on
  ``--icu-population`` simulated patients (cached in ``--icu-cache``); J(behaviour) and the
  recorded-horizon J(target) by Monte Carlo on as many.

    nice -n 10 timeout 5400 .venv/bin/python benchmarks/coverage_pipeline.py \\
        --domains random_mdp,signed_ward,heavy_tail,ward,icu --datasets 5 \\
        --json docs/results/coverage_pipeline.json
    .venv/bin/python benchmarks/coverage_pipeline.py --summarize docs/results/coverage_pipeline*.json
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

DOMAINS = ("random_mdp", "random_mdp_linear", "signed_ward", "heavy_tail", "ward", "ward_outcome",
           "icu")
KINDS = ("V", "J(target)", "J(behaviour)", "contrast")
ROW_KIND = {"policy_value": "J(target)", "behaviour_value": "J(behaviour)",
            "policy_contrast": "contrast"}
FIRST_SEED = 8100   # data sets 8100, 8101, ...: seeds no benchmark of the default used


class Tabular:
    """A tabular MDP with terminal states: P (S, A, S + K), R (S, A, S + K) paid on the
    transition, behaviour mu and target pi (S, A), start (S,), gamma and the record cap."""

    def __init__(self, P, R, mu, pi, start, gamma: float, cap: int):
        self.P, self.R, self.mu, self.pi, self.start = P, R, mu, pi, start
        self.gamma, self.cap = gamma, cap

    @property
    def S(self) -> int:
        return self.P.shape[0]

    def _model(self, pol):
        r = np.einsum("sa,sat,sat->s", pol, self.P, self.R)
        return r, np.einsum("sa,sat->st", pol, self.P[:, :, :self.S])

    def values(self) -> np.ndarray:
        r, P = self._model(self.pi)
        return np.linalg.solve(np.eye(self.S) - self.gamma * P, r)

    def recorded(self, pol) -> float:
        """E over admissions of a record's discounted return, cut at the cap."""
        r, P = self._model(pol)
        v = np.zeros(self.S)
        for _ in range(self.cap):
            v = r + self.gamma * P @ v
        return float(self.start @ v)

    def truths(self) -> dict:
        from own_data_trial import estimand_truths

        v = self.values()
        t = {"values": {f"s{s}": float(x) for s, x in enumerate(v)},
             "policy_value": self.recorded(self.pi), "behaviour_value": self.recorded(self.mu)}
        t["policy_contrast"] = t["policy_value"] - t["behaviour_value"]
        t["estimands"] = estimand_truths(t, float(self.start @ v))
        return t

    def generate(self, m: int, rng: np.random.Generator):
        from signed_ward_core import episodes

        return episodes(self.P, self.R, self.mu, self.start, m, self.cap, rng)

    def spec(self, name: str, reward_bounds: tuple[float, float]) -> dict:
        """The own-data spec an analyst would write: public bounds, no ``evaluation:`` block."""
        K, A = self.P.shape[2] - self.S, self.mu.shape[1]
        return {"name": name, "gamma": self.gamma, "normalization": "transition",
                "length_scale": self.cap,
                "feature_map": {"kind": "tabular", "n_states": self.S + K},
                "importance_weight_bound": float(np.ceil(np.max(self.pi / self.mu) * 1000) / 1000),
                "reward_bounds": list(reward_bounds),
                "target_policy": {"kind": "tabular", "probs": np.vstack(
                    [self.pi, np.full((K, A), 1.0 / A)]).tolist()},
                "reference_states": {f"s{s}": [float(s)] for s in range(self.S)}}


def signed_ward(seed: int) -> Tabular:
    from signed_ward_core import CAP, GAMMA, signed_rewards, ward

    P, mu, pi, start = ward(seed)
    return Tabular(P, signed_rewards(P), mu, pi, start, GAMMA, CAP)


def heavy_tail(seed: int) -> Tabular:
    """The signed ward plus a chronic cell (index 12): 5 % of admissions, a round there costs -1,
    it is left at about 3 % a round (the third treatment discharges a little more), cap 60."""
    from signed_ward_core import GAMMA, S, ward

    P0, mu0, pi0, start0 = ward(seed)
    C, A = S, P0.shape[1]
    P = np.zeros((S + 1, A, S + 3))
    P[:S, :, :S], P[:S, :, S + 1:] = P0[:, :, :S], P0[:, :, S:]
    for a in range(A):
        dis, die, worse = 0.008 + 0.006 * a, 0.008, 0.01
        P[C, a, S + 1], P[C, a, S + 2], P[C, a, S - 1] = dis, die, worse
        P[C, a, C] = 1.0 - dis - die - worse
    R = np.zeros_like(P)
    R[:, :, S + 1], R[:, :, S + 2] = 1.0, -1.0
    R[C, :, :S + 1] = -1.0
    rng = np.random.default_rng([seed, 0x4EA7])
    mu_c = 0.3 / A + 0.7 * rng.dirichlet(np.full(A, 2.0))
    pi_c = 0.5 * mu_c + 0.5 * rng.dirichlet(np.ones(A))
    start = np.append(0.95 * start0, 0.05)
    return Tabular(P, R, np.vstack([mu0, mu_c]), np.vstack([pi0, pi_c]), start, GAMMA, 60)


def write_tabular(mdp: Tabular, name: str, m: int, seed: int, folder: Path,
                  reward_bounds: tuple[float, float]) -> tuple[dict, dict]:
    """The cohort's bronze files (Parquet, as ``gpope simulate --to-files`` writes them), conf.yaml
    and spec.yaml under ``folder``; (files, truths)."""
    from gpope.core.envs.ehr import EventTableSpec, episodes_to_event_tables
    from gpope.shell.pipeline.simulate import tables_to_arrow

    tr = mdp.generate(m, np.random.default_rng([seed, m]))
    layout = EventTableSpec(variables=("acuity",), actions=("a0", "a1", "a2"),
                            terminal_variable="disposition")
    tables = episodes_to_event_tables(tr, layout, np.random.default_rng(seed))
    files = {}
    for table, arrow in tables_to_arrow(tables).items():
        files[table] = str(folder / f"{table}.parquet")
        arrow.to_pandas(coerce_temporal_nanoseconds=True).to_parquet(files[table])
    conf = {"datasets": {name: {"variables": ["acuity"], "actions": ["a0", "a1", "a2"],
                                "max_length": mdp.cap, "terminal_variable": "disposition"}}}
    (folder / "conf.yaml").write_text(yaml.safe_dump(conf, sort_keys=False))
    (folder / "spec.yaml").write_text(yaml.safe_dump(mdp.spec(name, reward_bounds),
                                                     sort_keys=False))
    return files, mdp.truths()


def write_generated(kind: str, m: int, seed: int, folder: Path) -> tuple[dict, dict]:
    """``gpope simulate --domain kind/seed --to-files``; truths of the generated MDP."""
    from own_data_trial import estimand_truths
    from policy_value_coverage import finite_horizon_value

    from gpope.api import write_cohort_files
    from gpope.core.envs.registry import random_mdp_of

    name = f"{kind}/{seed}"
    out = write_cohort_files(name, m, seed, folder, dataset=kind)
    mdp = random_mdp_of(name)
    t = {"values": json.loads(Path(out["truth"]).read_text())["values"],
         "policy_value": finite_horizon_value(mdp, mdp.target),
         "behaviour_value": finite_horizon_value(mdp, mdp.behaviour)}
    t["policy_contrast"] = t["policy_value"] - t["behaviour_value"]
    t["estimands"] = estimand_truths(t, float(mdp.start @ mdp.values()))
    return out["files"], t


def write_ward(m: int, seed: int, folder: Path) -> tuple[dict, dict]:
    import own_data_ward as ward
    from own_data_trial import rename

    truth = ward.write_dataset(folder, m, seed)
    rename(folder, ward.RENAME, ward.EXPORTS)
    return {t: str(folder / f"{t}.parquet") for t in ward.RENAME}, truth


def icu_truths(population: int, cache: Path) -> dict:
    """The ICU trial's estimands (computed once, cached): the LSTD fixed point of the spec's
    features on ``population`` patients at the reference states and averaged over admissions,
    the recorded-horizon returns of both policies by Monte Carlo (with standard errors)."""
    if cache.exists():
        got = json.loads(cache.read_text())
        if got.get("population") == population:
            return got
    import own_data_icu as icu
    from v_coverage_core import icu_transitions

    from gpope.core.spec import EvaluationSpec
    from gpope.core.ssp import split_vector, statistics_vectors
    from gpope.core.trajectories.batch import statistics_of_transitions

    spec = EvaluationSpec.from_mapping(icu_spec(icu))
    n, chunk = spec.n_features, 50000
    sums = None
    for k in range(max(1, population // chunk)):
        rows = statistics_of_transitions(
            icu_transitions(chunk, np.random.default_rng([7, k])), spec).to_rows()
        part = statistics_vectors(rows["A"], rows["b"], rows["C"]).sum(axis=0)
        sums = part if sums is None else sums + part
    A, b, _ = split_vector(sums[None, :], n)
    theta = np.linalg.solve(A[0], b[0])
    rng = np.random.default_rng([7, 0xC0])
    admitted = icu.admit(population, rng)
    direct = float(np.mean(spec.feature_map(admitted) @ theta))
    out: dict = {"population": population,
                 "values": dict(zip(icu.REFERENCE, map(float, spec.reference_values(theta)),
                                    strict=True))}
    for key, pol in (("policy_value", icu.target), ("behaviour_value", icu.behaviour)):
        ret = icu.rollout_returns(icu.admit(population, rng), pol, rng, icu.MAX_LENGTH)
        out[key], out[key + "_se"] = float(ret.mean()), float(ret.std() / np.sqrt(len(ret)))
    out["policy_contrast"] = out["policy_value"] - out["behaviour_value"]
    from own_data_trial import estimand_truths

    out["estimands"] = estimand_truths(out, direct)
    cache.write_text(json.dumps(out, indent=1))
    return out


def icu_spec(icu) -> dict:
    """The ICU trial's spec as its unit writes it (order 3, no interactions)."""
    return icu.spec_mapping(3, 1)


def write_icu(m: int, seed: int, folder: Path, truth: dict) -> tuple[dict, dict]:
    """The unit's exports (``own_data_icu.simulate``), renamed by the documented snippet."""
    import own_data_icu as icu
    from own_data_trial import rename

    frames, _, _ = icu.simulate(m, np.random.default_rng(seed))
    for table, frame in frames.items():
        frame.to_csv(folder / icu.EXPORTS[table], index=False)
    conf = {"datasets": {"icu": {"variables": ["lactate", "map"], "actions": list(icu.ACTIONS),
                                 "max_length": icu.MAX_LENGTH,
                                 "terminal_variable": "disposition"}}}
    (folder / "conf.yaml").write_text(yaml.safe_dump(conf, sort_keys=False))
    (folder / "spec.yaml").write_text(yaml.safe_dump(icu_spec(icu), sort_keys=False))
    rename(folder, icu.RENAME, icu.EXPORTS)
    return {t: str(folder / f"{t}.parquet") for t in icu.RENAME}, truth


def write_domain(domain: str, m: int, seed: int, folder: Path, args) -> tuple[str, dict, dict]:
    """(dataset name, bronze files, truths) of one fresh data set of ``domain``."""
    if domain in ("random_mdp", "random_mdp_linear"):
        return (domain, *write_generated(domain, m, seed, folder))
    if domain == "signed_ward":
        return (domain, *write_tabular(signed_ward(seed), domain, m, seed, folder, (-1.0, 1.0)))
    if domain == "heavy_tail":
        return (domain, *write_tabular(heavy_tail(seed), domain, m, seed, folder, (-1.0, 1.0)))
    if domain in ("ward", "ward_outcome"):
        files, truth = write_ward(m, seed, folder)
        if domain == "ward_outcome":  # the design: comfort <= 0.05 a round, one discharge of 1
            spec = yaml.safe_load((folder / "spec.yaml").read_text())
            spec["return_bounds"] = [0.0, 2.0]
            (folder / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
        return ("ward", files, truth)
    if domain == "icu":
        return ("icu", *write_icu(m, seed, folder, icu_truths(args.icu_population,
                                                              Path(args.icu_cache))))
    raise SystemExit(f"unknown domain {domain!r}; choose from {', '.join(DOMAINS)}")


def run_dataset(spark, domain: str, seed: int, args, work: Path) -> list[dict]:
    """One data set through the documented path; a record per released row."""
    from deltalake import DeltaTable
    from own_data_trial import ESTIMAND_KEYS

    from gpope import api

    folder = work / f"{domain}_{seed}"
    folder.mkdir(parents=True)
    t0 = time.time()
    name, files, truth = write_domain(domain, args.m, seed, folder, args)
    cfg = api.load_config(str(folder / "conf.yaml"), lake=str(folder / "lake"))
    api.load(spark, name, files, config=cfg)
    api.ingest(spark, name, config=cfg)
    api.stats(spark, name, str(folder / "spec.yaml"), config=cfg)
    api.set_budget(spark, name, epsilon=args.repeats * sum(args.epsilons) + 1,
                   delta=args.delta * (args.repeats * len(args.epsilons) + 1), config=cfg)
    prep = time.time() - t0
    out = []
    for eps in [e for e in args.epsilons for _ in range(args.repeats)]:
        t1 = time.time()
        rep = api.evaluate(spark, name, str(folder / "spec.yaml"), epsilon=eps,
                           delta=args.delta, config=cfg)
        rows = DeltaTable(str(folder / "lake" / "gold" / "released_values")).to_pandas()
        rows = rows[rows["run_id"] == rep.run_id]
        for r in rows.itertuples():
            kind = ROW_KIND.get(r.state, "V")
            key = ESTIMAND_KEYS.get(r.estimand)
            target = (truth["values"].get(r.state) if kind == "V"
                      else truth["estimands"].get(key))
            lo = -np.inf if r.lower is None or np.isnan(r.lower) else float(r.lower)
            hi = np.inf if r.upper is None or np.isnan(r.upper) else float(r.upper)
            out.append({"domain": domain, "seed": seed, "epsilon": eps, "run_id": rep.run_id,
                        "kind": kind, "state": r.state, "estimand": key or r.estimand,
                        "value": float(r.value), "lower": None if np.isinf(lo) else lo,
                        "upper": None if np.isinf(hi) else hi, "truth": target,
                        "covered": None if target is None else bool(lo <= target <= hi),
                        "finite": bool(np.isfinite(lo) and np.isfinite(hi)),
                        "seconds": round(time.time() - t1, 1)})
    print(f"{domain}/{seed}: prepared in {prep:.0f} s, "
          f"{len(args.epsilons) * args.repeats} evaluations in {time.time() - t0 - prep:.0f} s; "
          + ", ".join(f"eps {e:g}: {sum(r['covered'] is not False for r in out if r['epsilon'] == e)}"
                      f"/{sum(r['epsilon'] == e for r in out)} covered"
                      for e in args.epsilons), flush=True)
    return out


def clip_diagnosis(domain: str, seed: int, m: int, quantiles: list[float], epsilon: float) -> None:
    """Where a tabular data set's release moves a value (a private diagnostic, in memory, the
    pipeline data set's draw): per state the truth, the non-private LSTD, the noise-free SSP solve
    theta^ with the statistics clipped at each quantile of their norms, the probe's step
    ``theta^ + A_c^-1 (b - A theta^)`` (A_c the clipped sums' A, the residuals the unclipped
    rows'), the secant's last step from there (the default's refined theta), the ratio of A_c's diagonal to A's and the share of the state's
    patients the clip cuts; then 4 seeded releases of the default at ``epsilon`` with each
    statistics clip quantile (value, coverage and half-width at the state moved most)."""
    from dataclasses import replace

    from gpope.core.evaluation.settings import RunSettings
    from gpope.core.mechanisms.clipping import clip_rows
    from gpope.core.spec import EvaluationSpec
    from gpope.core.ssp import c_block_scale, split_vector, statistics_vectors
    from gpope.core.trajectories.batch import statistics_of_transitions
    from gpope.core.untuned.release import (
        UntunedSettings,
        _secant,
        plan_untuned,
        release_untuned_rows,
    )

    mdp = {"signed_ward": signed_ward, "heavy_tail": heavy_tail}[domain](seed)
    spec = EvaluationSpec.from_mapping(mdp.spec(domain, (-1.0, 1.0)))
    tr = mdp.generate(m, np.random.default_rng([seed, m]))
    rows = statistics_of_transitions(tr, spec).to_rows()
    vec = statistics_vectors(rows["A"], rows["b"], rows["C"])
    n, truth = spec.n_features, mdp.values()

    def solve(v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        A, b, _ = split_vector(v.sum(axis=0, keepdims=True), n)
        theta = np.zeros(n)
        theta[:mdp.S] = np.linalg.solve(A[0][:mdp.S, :mdp.S], b[0][:mdp.S])
        return theta, A[0], b[0]

    lstd, A, b = solve(vec)
    w = c_block_scale(n, UntunedSettings().second_moment_weight)
    norms = np.linalg.norm(vec * w, axis=1)
    visits = [np.unique(tr.traj_index[tr.state[:, 0] == s]) for s in range(mdp.S)]
    print(f"{domain}/{seed}, m {m}: state, truth, LSTD, then per clip quantile q: theta^, "
          "the probe's step theta^ + A_c^-1 (b - A theta^), the secant's last step, "
          "diag(A_c)/diag(A), share of the state's patients clipped")
    worst = None   # the state the first quantile's refinement moves most from the LSTD
    for q in quantiles:
        clip = float(np.quantile(norms, q))
        theta0, A_c, _ = solve(clip_rows(vec * w, clip) / w)
        A_cs = A_c[:mdp.S, :mdp.S]
        P = np.linalg.inv(A_cs)
        refined = theta0.copy()
        refined[:mdp.S] += P @ (b - A @ theta0)[:mdp.S]
        secant = refined.copy()   # the default's probe step, its noises 0
        secant[:mdp.S] += _secant(A_cs, P, (b - A @ theta0)[:mdp.S], (b - A @ refined)[:mdp.S],
                                  noise0=0.0, noise1=0.0, noise_a=0.0,
                                  z=UntunedSettings().secant_z).step
        if worst is None:
            worst = int(np.argmax(np.abs(refined - lstd)[:mdp.S]))
        print(f"  q {q}: clip {clip:.4g} cuts {np.mean(norms > clip):.3f} of the patients")
        for s in range(mdp.S):
            print(f"    s{s:<3} {truth[s]:>8.3f} {lstd[s]:>8.3f} {theta0[s]:>8.3f} "
                  f"{refined[s]:>8.3f} {secant[s]:>8.3f} {A_c[s, s] / A[s, s]:>6.3f} "
                  f"{np.mean(norms[visits[s]] > clip):>6.3f}")
    run = RunSettings()
    for q in quantiles:
        settings = replace(UntunedSettings(), clip_quantile=q)
        sig = plan_untuned(m=m, epsilon=epsilon, delta=1e-6, settings=settings,
                           share=1.0 - run.policy_value_share)
        ivs = [release_untuned_rows(vec, spec, sigmas=sig, moments_share=run.moments_share,
                                    settings=settings, rng=np.random.default_rng([r, seed])
                                    ).interval for r in range(4)]
        print(f"  release at epsilon {epsilon:g}, clip quantile {q}: s{worst} "
              f"{[round(float(iv.value[worst]), 2) for iv in ivs]}, covered "
              f"{sum(bool(iv.lower[worst] <= truth[worst] <= iv.upper[worst]) for iv in ivs)}/4,"
              f" half-width {np.median([(iv.upper[worst] - iv.lower[worst]) / 2 for iv in ivs]):.3f}"
              f"; other states' median half-width "
              f"{np.median([(iv.upper - iv.lower)[:worst] / 2 for iv in ivs]):.3f}")


def summarize(records: list[dict]) -> list[dict]:
    """Per domain x epsilon x row kind: releases, coverage, finite share, mean finite half-width."""
    rows = []
    for dom in [d for d in DOMAINS if any(r["domain"] == d for r in records)]:
        for eps in sorted({r["epsilon"] for r in records if r["domain"] == dom}):
            cell = [r for r in records if r["domain"] == dom and r["epsilon"] == eps]
            row = {"domain": dom, "epsilon": eps, "datasets": len({r["seed"] for r in cell}),
                   "releases": len({r["run_id"] for r in cell})}
            picked = [r["estimand"] == "direct" for r in cell if r["kind"] == "J(target)"]
            row["direct_share"] = float(np.mean(picked)) if picked else None
            for kind in KINDS:
                rs = [r for r in cell if r["kind"] == kind]
                scored = [r for r in rs if r["covered"] is not None]
                half = [(r["upper"] - r["lower"]) / 2 for r in rs if r["finite"]]
                row[kind] = {"intervals": len(rs), "unscored": len(rs) - len(scored),
                             "coverage": float(np.mean([r["covered"] for r in scored]))
                             if scored else None,
                             "finite": float(np.mean([r["finite"] for r in rs])) if rs else None,
                             "mean_half_width": float(np.mean(half)) if half else None,
                             "estimands": sorted({r["estimand"] for r in rs})}
            rows.append(row)
    return rows


def markdown(rows: list[dict]) -> str:
    head = ("| domain | epsilon | data sets | releases | direct J(target) | "
            + " | ".join(f"{k}: coverage, finite, mean half-width" for k in KINDS) + " |")
    lines = [head, "|" + "---|" * (5 + len(KINDS))]
    for row in rows:
        cells = []
        for k in KINDS:
            c = row[k]
            if not c["intervals"]:
                cells.append("-")
                continue
            cov = "-" if c["coverage"] is None else f"{c['coverage']:.2f}"
            if c["coverage"] is not None and c["coverage"] < 0.9:
                cov = f"**{cov}**"
            hw = "-" if c["mean_half_width"] is None else f"{c['mean_half_width']:.3g}"
            n = f" ({c['intervals']})" if k == "V" else ""
            cells.append(f"{cov}{n}, {c['finite']:.2f}, {hw}")
        direct = "-" if row["direct_share"] is None else f"{row['direct_share']:.2f}"
        lines.append(f"| {row['domain']} | {row['epsilon']:g} | {row['datasets']} | "
                     f"{row['releases']} | {direct} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def signed(records: list[dict]) -> str:
    """Per domain and epsilon: the smallest true contrast the release signs in 80 % of runs under
    the location model of RESULTS "Can it tell which policy is better?" (the 0.8 quantile of
    truth - lower over the contrast rows)."""
    lines = ["| domain | epsilon | releases | contrast half-width (median) | smallest contrast "
             "signed in 80% |", "|---|---|---|---|---|"]
    for dom in [d for d in DOMAINS if any(r["domain"] == d for r in records)]:
        for eps in sorted({r["epsilon"] for r in records if r["domain"] == dom}):
            rs = [r for r in records if r["domain"] == dom and r["epsilon"] == eps
                  and r["kind"] == "contrast" and r["finite"]]
            if rs:
                gap = [r["truth"] - r["lower"] for r in rs]
                half = [(r["upper"] - r["lower"]) / 2 for r in rs]
                lines.append(f"| {dom} | {eps:g} | {len(rs)} | {np.median(half):.3g} | "
                             f"{np.quantile(gap, 0.8):.3g} |")
    return "\n".join(lines)


def brief(rows: list[dict]) -> str:
    """Per domain: each row kind's lowest coverage over the epsilons, and the contrast's mean
    half-width per epsilon (docs/OWN_DATA.md, "Reading the output")."""
    doms = list(dict.fromkeys(r["domain"] for r in rows))
    eps = sorted({r["epsilon"] for r in rows})
    lines = ["| domain | " + " | ".join(KINDS) + " | contrast half-width at epsilon "
             + " / ".join(f"{e:g}" for e in eps) + " |", "|" + "---|" * (len(KINDS) + 2)]
    for dom in doms:
        cell = {r["epsilon"]: r for r in rows if r["domain"] == dom}
        cov = [min(c[k]["coverage"] for c in cell.values() if c[k]["coverage"] is not None)
               for k in KINDS]
        hw = [cell[e]["contrast"]["mean_half_width"] if e in cell else None for e in eps]
        lines.append(f"| {dom} | " + " | ".join(f"{c:.2f}" for c in cov) + " | "
                     + " / ".join("-" if h is None else f"{h:.2g}" for h in hw) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--domains", default="random_mdp,signed_ward,heavy_tail,ward,icu")
    p.add_argument("--datasets", type=int, default=5, help="data sets per domain")
    p.add_argument("--first-seed", type=int, default=FIRST_SEED)
    p.add_argument("--m", type=int, default=20000)
    p.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 10.0])
    p.add_argument("--delta", type=float, default=1e-6)
    p.add_argument("--repeats", type=int, default=1,
                   help="evaluate runs per epsilon on each data set's statistics (fresh noise)")
    p.add_argument("--icu-population", type=int, default=400000)
    p.add_argument("--icu-cache", default="/tmp/coverage_pipeline_icu_truth.json")
    p.add_argument("--json", default=None, help="write the records and the table here")
    p.add_argument("--clip-diagnosis", nargs=2, metavar=("DOMAIN", "SEED"),
                   help="signed_ward or heavy_tail and a data set's seed: where the statistics "
                        "clip moves its values (in memory, no Spark; a private diagnostic)")
    p.add_argument("--clip-quantiles", type=float, nargs="+", default=[0.9, 0.99])
    p.add_argument("--summarize", nargs="+", metavar="JSON",
                   help="print the table of earlier runs' JSON files (merged) and exit")
    a = p.parse_args(argv)
    if a.clip_diagnosis:
        clip_diagnosis(a.clip_diagnosis[0], int(a.clip_diagnosis[1]), a.m, a.clip_quantiles,
                       max(a.epsilons))
        return 0
    if a.summarize:
        records = [r for f in a.summarize for r in json.loads(Path(f).read_text())["records"]]
        print(markdown(summarize(records)))
        print("\nLowest coverage over the epsilons, per row kind:\n")
        print(brief(summarize(records)))
        print("\nThe smallest true contrast signed in 80 % of runs:\n")
        print(signed(records))
        return 0
    from gpope import api

    spark = api.get_spark()
    records: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="gpope-coverage-") as tmp:
        for i in range(a.datasets):
            for dom in a.domains.split(","):
                records += run_dataset(spark, dom, a.first_seed + i, a, Path(tmp))
                if a.json:  # partial results survive an interrupted run
                    Path(a.json).write_text(json.dumps(
                        {"command": " ".join(sys.argv), "summary": summarize(records),
                         "records": records}, indent=1))
    print(markdown(summarize(records)))
    print(f"\n{' '.join(sys.argv)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
