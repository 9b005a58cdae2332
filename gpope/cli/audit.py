"""``gpope audit``: empirical privacy audit of the private mechanisms (canaries, two neighbouring worlds).

Runs each real mechanism ``--runs`` times on two neighbouring data sets (a canary record added,
removed or replaced), computes a likelihood-ratio statistic, chooses a threshold on half the
runs and reports a Clopper-Pearson epsilon lower bound next to the claimed epsilon: GPOPE per
sampling scheme, the SSP release under both adjacencies, the policy value release and the
tuning-free default's two releases (gpope.core.audit). The presets (small m, few steps, many runs)
keep the accountant nearly tight, so a factor-2 error shows; ``--include-broken`` also audits
deliberately broken mechanisms (noise x0.5, the sigma-for-sigma/2 trap, noise/10, no clipping).
Exit status 0 only when every real mechanism passes and, with --include-broken, every broken one
is detected. A lower bound never proves privacy; exceeding the claim proves a bug (docs/AUDIT.md).
"""

from __future__ import annotations

import argparse
from typing import Any

from gpope.cli._common import add_json_flag, emit
from gpope.core.estimators import audit, audit_names
from gpope.core.estimators.base import AuditRequest


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``audit`` command."""
    parser = subparsers.add_parser(
        "audit", help="empirical privacy audit of the private mechanisms",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--sampling", nargs="+", choices=("uniform", "poisson"),
                        default=["uniform", "poisson"], help="GPOPE sampling schemes to audit")
    parser.add_argument("--estimator", nargs="+", choices=audit_names(),
                        default=list(audit_names()), help="mechanisms to audit")
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


def audit_request(args: argparse.Namespace) -> AuditRequest:
    """What the command's flags ask of each audited release."""
    overrides = {k: v for k, v in (("m", args.m), ("iterations", args.iterations),
                                   ("epsilon", args.epsilon), ("runs", args.runs))
                 if v is not None}

    def policy_value_settings() -> Any:
        from gpope import api

        return api.load_config(args.conf or None).evaluation.policy_value_settings()

    return AuditRequest(samplings=tuple(args.sampling), overrides=overrides, delta=args.delta,
                        seed=args.seed, quick=args.quick, include_broken=args.include_broken,
                        statistic=args.statistic, policy_value_settings=policy_value_settings)


def _run(args: argparse.Namespace) -> int:
    if args.pipeline:
        return _run_pipeline(args)
    request = audit_request(args)
    pairs = [pair for name in args.estimator for pair in audit(name, request)]
    return _report(args, [n for n, _ in pairs], [r for _, r in pairs])


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
