"""``gpope audit``: empirical privacy audit of the private mechanisms (canaries, two neighbouring worlds).

Runs the real GPOPE solver ``--runs`` times on each of two neighbouring data sets per sampling
scheme (uniform: a replace-one canary pair at distance 2h; Poisson: a canary added/removed), reads
the canary coordinate of every iterate, computes a likelihood-ratio statistic, chooses a
threshold on half the runs and reports a Clopper-Pearson epsilon lower bound next to the claimed
epsilon (see gpope.core.audit.gpope). The SSP release is audited the same way under both adjacencies
(gpope.core.audit.ssp): add/remove (--estimator ssp, Poisson runs) and replace-one (the
statistics share of uniform-sampling runs, a canary pair at distance 2 clip). The policy value
release (--estimator policy_value: clip histograms and moment sums, one Gaussian mechanism at the
run's policy-value share) is audited with a canary patient at the public maxima
(gpope.core.audit.policy_value). The tuning-free default (--estimator untuned) is audited in two
releases (gpope.core.audit.untuned): its SSP release (the weighted rows [A, b, w C] clipped,
noised at the default's plan, C divided by w; a canary in the C block, against the claim of a
default run) and its residual release (clipped residuals and their moments; against the epsilon
the run's accountant certifies for that release alone).

The settings default to documented presets (small m, few steps, many runs) in which the
accountant is nearly tight, so a factor-2 error shows. ``--include-broken`` also audits
deliberately broken mechanisms built through the solver's test-only hook: noise x0.5, the
sigma-for-sigma/2 trap (uniform sampling calibrated for sensitivity h instead of 2h; Poisson
sigma/2; replace-one SSP calibrated for sensitivity clip), noise/10 and clipping skipped.
The uniform preset has m = 1: without subsampling the replace-one accountant is nearly tight, so
a factor-2 error is a provable violation (at m = 2 the subsampled bound is loose enough to hide
it; docs/AUDIT.md). Exit status 0 only when every real mechanism passes and, with
--include-broken, every broken one is detected. A lower bound never proves privacy; exceeding the claim
proves a bug.
"""

from __future__ import annotations

import argparse
from typing import Any

from gpope.cli._common import add_json_flag, emit

_BROKEN = {
    "noise x0.5": {"noise_scale": 0.5},
    "sigma-for-sigma/2": {"sensitivity": "h"},
    "noise/10": {"noise_scale": 0.1},
    "no-clip": {"clip": False},
}


def _broken_ssp(relation: str) -> list[tuple[str, dict[str, object]]]:
    """Broken SSP releases: under add/remove sigma-for-sigma/2 IS noise x0.5 (one variant)."""
    out: list[tuple[str, dict[str, object]]] = [("noise x0.5", {"_noise_scale": 0.5})]
    if relation == "replace_one":
        out.append(("sigma-for-sigma/2", {"_sensitivity_trap": True}))
    return [*out, ("noise/10", {"_noise_scale": 0.1})]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``audit`` command."""
    parser = subparsers.add_parser(
        "audit", help="empirical privacy audit of the private mechanisms",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--sampling", nargs="+", choices=("uniform", "poisson"),
                        default=["uniform", "poisson"], help="GPOPE sampling schemes to audit")
    parser.add_argument("--estimator", nargs="+",
                        choices=("gpope", "ssp", "policy_value", "untuned"),
                        default=["gpope", "ssp", "policy_value", "untuned"],
                        help="mechanisms to audit")
    parser.add_argument("--m", type=int, default=None, help="trajectories per data set (preset)")
    parser.add_argument("--iterations", type=int, default=None, help="solver steps N (preset)")
    parser.add_argument("--epsilon", type=float, default=None, help="claimed epsilon (preset)")
    parser.add_argument("--delta", type=float, default=1e-5, help="delta")
    parser.add_argument("--runs", type=int, default=None, help="runs per world (preset)")
    parser.add_argument("--statistic", choices=("likelihood_ratio", "max_increment", "final"),
                        default="likelihood_ratio",
                        help="white-box likelihood ratio (default), largest one-step move, or "
                             "black-box final iterate")
    parser.add_argument("--quick", action="store_true", help="fewer runs for GPOPE and SSP (faster, smaller margins); the policy value and tuning-free default audits keep theirs")
    parser.add_argument("--include-broken", action="store_true",
                        help="also audit deliberately broken mechanisms (noise x0.5, "
                             "sigma-for-sigma/2, noise/10, no clipping)")
    parser.add_argument("--pipeline", action="store_true",
                        help="instead: audit the real evaluate path end to end (local Spark, a "
                             "temporary lake, two neighbouring one-patient datasets, released "
                             "theta only; with --include-broken also the unclipped solver)")
    parser.add_argument("--seed", type=int, default=0, help="seed (audits are not private runs)")
    parser.add_argument("--conf", default=None,
                        help="YAML configuration whose evaluation.policy_value (and "
                             "policy_value_share) the policy value audit uses (default: the "
                             "packaged conf/default.yaml)")
    add_json_flag(parser)
    parser.set_defaults(func=_run)


def _run_pipeline(args: argparse.Namespace) -> int:
    from gpope import api

    pairs = api.pipeline_audit(delta=args.delta, seed=args.seed, runs=args.runs,
                               epsilon=args.epsilon, iterations=args.iterations,
                               include_broken=args.include_broken)
    return _report(args, [n for n, _ in pairs], [r for _, r in pairs])


def _run(args: argparse.Namespace) -> int:
    if args.pipeline:
        return _run_pipeline(args)
    from gpope.core.audit.gpope import AuditConfig, run_audit
    from gpope.core.audit.ssp import SSPAuditConfig, run_ssp_audit

    overrides = {k: v for k, v in (("m", args.m), ("iterations", args.iterations),
                                   ("epsilon", args.epsilon), ("runs", args.runs))
                 if v is not None}
    results = []
    names = []
    if "gpope" in args.estimator:
        for sampling in args.sampling:
            cfg = AuditConfig.preset(sampling, quick=args.quick, delta=args.delta,
                                     statistic=args.statistic, **overrides)
            variants = [("real", None)] + (list(_BROKEN.items()) if args.include_broken else [])
            for name, override in variants:
                results.append(run_audit(cfg, args.seed, _mechanism_override=override))
                names.append(name)
    if "ssp" in args.estimator:
        ssp_kw = _canary_overrides(overrides)
        if args.quick and "runs" not in ssp_kw:
            ssp_kw["runs"] = SSPAuditConfig().runs // 2
        for relation in ("add_or_remove_one", "replace_one"):
            cfg_ssp = SSPAuditConfig(delta=args.delta, relation=relation, **ssp_kw)
            variants_ssp = [("real", {})] + (_broken_ssp(relation) if args.include_broken else [])
            for name, kw in variants_ssp:
                results.append(run_ssp_audit(cfg_ssp, args.seed, **kw))
                names.append(name)
    if "policy_value" in args.estimator:
        from gpope import api
        from gpope.core.audit.policy_value import run_policy_value_audit

        pv_settings = api.load_config(args.conf or None).evaluation.policy_value_settings()
        cfg_pv = policy_value_config(args, overrides)
        variants_pv = [("real", {})] + ([("noise x0.5", {"_noise_scale": 0.5}),
                                         ("noise/10", {"_noise_scale": 0.1})]
                                        if args.include_broken else [])
        for name, kw in variants_pv:
            results.append(run_policy_value_audit(cfg_pv, args.seed, settings=pv_settings,
                                                  **kw))
            names.append(name)
    if "untuned" in args.estimator:
        from gpope.core.audit.untuned import UntunedAuditConfig, run_untuned_audit

        kw_un = _canary_overrides(overrides)
        broken_un = {"ssp": [("noise x0.5", {"_noise_scale": 0.5}),
                             ("C noise unweighted", {"_unweighted_c_noise": True})],
                     "residual": [("noise x0.5", {"_noise_scale": 0.5})]}
        for release, broken in broken_un.items():
            cfg_un = UntunedAuditConfig.preset(release, delta=args.delta, **kw_un)
            for name, kw in [("real", {})] + (broken if args.include_broken else []):
                results.append(run_untuned_audit(cfg_un, args.seed, **kw))
                names.append(name)
    return _report(args, names, results)


def policy_value_config(args: argparse.Namespace, overrides: dict[str, object]) -> Any:
    """The policy value audit's :class:`~gpope.core.audit.policy_value.PolicyValueAuditConfig`:
    the preset with the caller's ``--m``, ``--epsilon``, ``--runs``. ``--quick`` keeps its
    runs: they take about 10 s, and at half of them a factor-2 noise error of the release is no
    longer provable (docs/AUDIT.md), so a quick audit would pass a broken release."""
    from gpope.core.audit.policy_value import PolicyValueAuditConfig

    return PolicyValueAuditConfig(delta=args.delta, **_canary_overrides(overrides))


def _canary_overrides(overrides: dict[str, object]) -> dict[str, object]:
    """The caller's ``--m``, ``--epsilon``, ``--runs``: the settings the canary audits (SSP,
    policy value, the tuning-free default) take; the GPOPE-only ones (``--iterations``) dropped."""
    return {k: v for k, v in overrides.items() if k in ("m", "epsilon", "runs")}


def _report(args: argparse.Namespace, names: list[str], results: list) -> int:
    real_ok = all(r.passed for r in results if r.override is None)
    broken = [(n, r) for n, r in zip(names, results, strict=True) if r.override is not None]
    caught = all(not r.passed for _, r in broken)
    payload = {"results": [{**r.to_dict(), "variant": n} for n, r in zip(names, results,
                                                                        strict=True)],
               "real_solver_passed": real_ok,
               "broken_solvers_detected": caught if args.include_broken else None}
    lines = [r.summary() for r in results]
    lines.append("real mechanisms: " + ("no violation found" if real_ok else "VIOLATION FOUND"))
    if args.include_broken:
        missed = [f"{r.config['sampling']} {n}" for n, r in broken if r.passed]
        lines.append("broken mechanisms: " + ("all detected" if caught else
                                              "NOT detected: " + ", ".join(missed)))
    emit(args, payload, "\n".join(lines))
    return 0 if real_ok and (caught or not args.include_broken) else 1
