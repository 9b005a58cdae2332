"""``gpope audit``: empirical privacy audit of the GPOPE solver (canary, two neighbouring worlds).

Runs the real solver ``--runs`` times on each of two neighbouring data sets per sampling scheme,
chooses a threshold on half the runs and reports a Clopper-Pearson epsilon lower bound next to the
claimed epsilon (see gpope.core.audit). ``--include-broken`` also audits two deliberately broken
mechanisms (noise divided by 10; clipping skipped) built through the solver's test-only hook, to
show that the audit catches them. A lower bound never proves privacy; exceeding the claim proves a bug.
"""

from __future__ import annotations

import argparse

from gpope.shell.cli._common import add_json_flag, emit

_BROKEN = {"noise/10": {"noise_scale": 0.1}, "no-clip": {"clip": False}}


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``audit`` command."""
    parser = subparsers.add_parser(
        "audit", help="empirical privacy audit of the private solver",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--sampling", nargs="+", choices=("uniform", "poisson"),
                        default=["uniform", "poisson"], help="sampling schemes to audit")
    parser.add_argument("--m", type=int, default=1000, help="trajectories per data set")
    parser.add_argument("--iterations", type=int, default=1000, help="solver steps N")
    parser.add_argument("--epsilon", type=float, default=2.0, help="claimed epsilon")
    parser.add_argument("--delta", type=float, default=1e-5, help="delta")
    parser.add_argument("--runs", type=int, default=2000, help="runs per world")
    parser.add_argument("--statistic", choices=("max_increment", "final"), default="max_increment",
                        help="white-box (largest one-step move) or black-box (final iterate)")
    parser.add_argument("--include-broken", action="store_true",
                        help="also audit deliberately broken mechanisms (noise/10, no clipping)")
    parser.add_argument("--seed", type=int, default=0, help="seed (audits are not private runs)")
    add_json_flag(parser)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from gpope.core.audit import AuditConfig, run_audit

    results = []
    for sampling in args.sampling:
        cfg = AuditConfig(sampling=sampling, m=args.m, iterations=args.iterations,
                          epsilon=args.epsilon, delta=args.delta, runs=args.runs,
                          statistic=args.statistic)
        variants = [None] + (list(_BROKEN.values()) if args.include_broken else [])
        for override in variants:
            results.append(run_audit(cfg, args.seed, _mechanism_override=override))
    real_ok = all(r.passed for r in results if r.override is None)
    broken_caught = all(not r.passed for r in results if r.override is not None)
    payload = {"results": [r.to_dict() for r in results], "real_solver_passed": real_ok,
               "broken_solvers_detected": broken_caught if args.include_broken else None}
    lines = [r.summary() for r in results]
    lines.append("real solver: " + ("no violation found" if real_ok else "VIOLATION FOUND"))
    if args.include_broken:
        lines.append("broken solvers: " + ("all detected" if broken_caught else "NOT all detected"))
    emit(args, payload, "\n".join(lines))
    return 0 if real_ok and (broken_caught or not args.include_broken) else 1
