"""``gpope evaluate``: a differentially private evaluation (ledger, released_estimates, MLflow)."""

from __future__ import annotations

import argparse

from gpope.cli._common import add_dataset_option, add_lake_options, emit
from gpope.core.accounting.registry import accountant_choices, accountant_help
from gpope.core.estimators import estimator_choices, estimator_help

#: The solver's flags: a type, or the choices, and the help; unset, each takes the spec's
#: evaluation: block, then ``evaluation:`` of --conf. ``gpope tune --spec`` fixes some of them too.
SOLVER_FLAGS: dict[str, tuple[type | tuple[str, ...], str]] = {
    "--passes": (float, "compute budget: trajectories touched / m (Poisson q = passes / N)"),
    "--iterations": (int, "N, number of noisy steps"),
    "--batch-rate": (float, "Poisson rate q"),
    "--batch-size": (float, "expected Poisson batch q m (alternative to --batch-rate)"),
    "--clip": (float, "L2 clip bound h of each gradient"),
    "--step-size": (float, "eta"),
    "--step-schedule": (("constant", "inverse"), "constant eta, or eta / (i + i0)"),
    "--step-offset": (float, "absolute i0 of the inverse schedule"),
    "--step-offset-fraction": (float, "i0 = fraction * N (alternative to --step-offset)"),
    "--averaging": (("none", "uniform", "tail"), "iterate averaging (post-processing, free)"),
    "--tail-fraction": (float, "fraction of the last iterates averaged with --averaging tail"),
    "--sampling": (("uniform", "poisson"),
                   "uniform: one trajectory per step (the paper); poisson: rate q"),
    "--trace-every": (int, "log public MSPBE every k steps (default N/20)"),
}


def add_solver_flags(group: argparse._ActionsContainer, flags: tuple[str, ...]) -> None:
    """Add ``flags`` of :data:`SOLVER_FLAGS` to ``group``, each None when not given."""
    for flag in flags:
        kind, text = SOLVER_FLAGS[flag]
        if isinstance(kind, tuple):
            group.add_argument(flag, choices=kind, default=None, help=text)
        else:
            group.add_argument(flag, type=kind, default=None, help=text)


def add_solver_options(parser: argparse.ArgumentParser) -> None:
    """Options of the private solver; unset ones take the spec's evaluation: block, then
    ``evaluation:`` of --conf."""
    g = parser.add_argument_group(
        "solver (public settings; unset ones come from the spec's evaluation: block, written by "
        "`gpope tune --spec`, then from 'evaluation:' in --conf)")
    add_solver_flags(g, tuple(SOLVER_FLAGS))
    g.add_argument("--accountant", choices=accountant_choices(), default=None,
                   help=accountant_help() + ". An accountant that is not a valid bound is "
                   "refused unless --allow-invalid-accounting")
    g.add_argument(
        "--tune", choices=("none", "private"), default=None,
        help="private: choose the clip bound and step size ON THE PRIVATE DATA, inside this "
        "run's --epsilon/--delta (private quantiles set the clips, GPOPE runs once per "
        "evaluation.private_tuning.step_multipliers, the best by private MSPBE is released; all "
        "of it one event charged once). Needs --sampling poisson and statistics that fit in "
        "driver memory. Default: evaluation.tune of --conf (none)")
    e = parser.add_argument_group("estimator, noisy statistics and intervals (defaults from 'evaluation:')")
    e.add_argument("--estimator", choices=estimator_choices(), default=None,
                   help=estimator_help() + " (default: evaluation.estimator of --conf, gpope; "
                   "a spec without an evaluation: block takes the tuning-free default unless an "
                   "estimator or solver flag is given)")
    e.add_argument("--ssp-clip", type=float, default=None,
                   help="override: a public L2 bound of one trajectory's [A_i, b_i, C_i] "
                   "(default: a public quantile on the spec's simulator; own data: a private "
                   "quantile of the statistics norms, charged to the run)")
    e.add_argument("--ssp-clip-quantile", type=float, default=None, metavar="Q",
                   help="that quantile, in (0, 1] (default: the spec's evaluation: block, then "
                   "evaluation.ssp_clip_quantile of --conf)")
    e.add_argument("--moments-share", type=float, default=None,
                   help="share (zCDP, of 1/sigma^2) of the noisy-statistics release spent on the "
                   "residual second moments the intervals need (default 0.1)")
    e.add_argument("--statistics-share", type=float, default=None,
                   help="gpope runs: share of (epsilon, delta) for the noisy-statistics release that "
                   "gives the private MSPBE and the intervals (0 disables; default 0.1)")
    e.add_argument("--policy-value-share", type=float, default=None,
                   help="share of the run's budget for J(target), J(behaviour) and their "
                   "contrast with intervals (0 disables; default 0.3)")
    e.add_argument("--ci-level", type=float, default=None,
                   help="level of the two-sided intervals and the one-sided lower bound (0.95)")
    e.add_argument("--interval-groups", type=int, default=None, metavar="K",
                   help="gpope runs: K >= 2 splits the patients into K disjoint groups by a public "
                   "hash of the patient id, runs GPOPE once per group and releases the mean with "
                   "a Student-t interval from their spread, at the privacy cost of one run "
                   "(--sampling poisson only); each group's noise is K times larger relative to "
                   "its gradient, so it pays when m / K is large (docs/RESULTS.md). 0: the hull "
                   "of the noisy-statistics interval and the value. Default: the spec's "
                   "evaluation: block rule (interval_groups where m and m * epsilon reach its "
                   "thresholds), else evaluation: in --conf (0)")


#: The ``--allow-*`` flags of evaluate and its job entry point: each accepts a run that is refused
#: by default, and the run records that it was accepted.
_OVERRIDES = {
    "--allow-invalid-accounting": "run with --accountant paper anyway: the release is then NOT "
    "private everywhere (tables, MLflow, output), labelled 'not a valid bound', and the ledger "
    "charges a rigorous RDP bound of its mechanism",
    "--allow-not-private": "accept --seed on a dataset not produced by `gpope simulate`: the "
    "release is NOT private (the seed itself is never stored)",
    "--allow-stale-stats": "release from the spec's statistics even when a later `gpope ingest` "
    "replaced the transitions they were computed from (refused otherwise); the run records it "
    "(a warning in its report and --json, MLflow tag gpope.stale_stats)",
}


def add_privacy_overrides(parser: argparse.ArgumentParser) -> None:
    """The ``--allow-*`` flags (:data:`_OVERRIDES`)."""
    for flag, text in _OVERRIDES.items():
        parser.add_argument(flag, action="store_true", help=text)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``evaluate`` command."""
    parser = subparsers.add_parser(
        "evaluate",
        help="private run: reserve budget, GPOPE on the statistics, release theta, log to MLflow",
        description=("Evaluate the spec's target policy on a dataset with (epsilon, "
                     "delta)-differential privacy per patient. The spend is reserved in the "
                     "privacy ledger before anything is drawn or written (a run past the budget "
                     "stops, writing nothing); theta and the values at the spec's reference "
                     "states go to released_estimates, params, metrics and artifacts to MLflow. "
                     "Solver settings come from the spec's evaluation: block; a spec without one "
                     "gets the tuning-free private default (docs/OWN_DATA.md)."),
    )
    add_dataset_option(parser)
    parser.add_argument("--spec", required=True, help="evaluation spec YAML")
    parser.add_argument("--epsilon", type=float, required=True, help="epsilon spent by this run")
    parser.add_argument("--delta", type=float, required=True, help="delta spent by this run")
    add_solver_options(parser)
    parser.add_argument("--seed", type=int, default=None,
                        help="fixed seed for sampling and noise: reproducible but NOT private "
                             "(marked so; never stored). Refused on datasets not produced by "
                             "`gpope simulate` unless --allow-not-private")
    parser.add_argument("--secure-noise", action="store_true", default=None,
                        help="noise from the OS CSPRNG as a discrete Gaussian on a public grid, "
                             "released values rounded to it; refuses --seed; in-memory path only; "
                             "needs --sampling uniform with the rdp accountant (or --estimator "
                             "ssp --accountant rdp)")
    add_privacy_overrides(parser)
    parser.add_argument("--stream", choices=("auto", "memory", "stream"), default=None,
                        help="statistics in driver memory or streamed from Spark (auto: by size)")
    parser.add_argument("--private-diagnostics", action="store_true",
                        help="also log MSPBE/LSTD of the PRIVATE statistics to MLflow, tagged "
                        "diagnostic.private=true (operators only; never released)")
    parser.add_argument("--print-private-diagnostics", action="store_true",
                        help="with --json, also print those private diagnostics (LSTD theta...) "
                        "under 'private_diagnostics', tagged diagnostic.private=true: operators "
                        "only, never in a shared job log (implies --private-diagnostics)")
    parser.add_argument("--public-trajectories", type=int, default=None,
                        help="size of the public simulated cohort for MSPBE (spec with a domain; "
                        "0 disables; default 100)")
    add_lake_options(parser, tracking=True)
    parser.set_defaults(func=_run)


#: Settings named like their flag (``--step-size`` -> ``step_size``); argparse leaves unset ones None.
_FLAGS = ("passes", "iterations", "batch_rate", "batch_size", "clip", "step_size", "step_schedule",
          "step_offset", "step_offset_fraction", "averaging", "tail_fraction", "sampling",
          "accountant", "trace_every", "tune", "estimator", "ssp_clip", "ssp_clip_quantile",
          "moments_share", "statistics_share", "policy_value_share", "ci_level",
          "interval_groups", "secure_noise", "private_diagnostics", "public_trajectories")


def settings_from_args(args: argparse.Namespace) -> dict:
    """The settings the parsed arguments set (the command-line layer; unset flags are absent):
    :func:`gpope.api.evaluate_options` checks them."""
    given = {k: getattr(args, k, None) for k in _FLAGS}
    given["path"] = getattr(args, "stream", None)
    for flag in _OVERRIDES:
        name = flag[2:].replace("-", "_")
        given[name] = getattr(args, name, False) or None
    # printing the private diagnostics needs them computed: the print flag implies the other
    if getattr(args, "print_private_diagnostics", False):
        given["private_diagnostics"] = True
    if not given.get("private_diagnostics"):
        given["private_diagnostics"] = None
    return {k: v for k, v in given.items() if v is not None}


def _run(args: argparse.Namespace) -> int:
    from gpope import api
    from gpope.cli._common import config_from_args

    config = config_from_args(args)
    # every argument, the spec and the configuration are checked before Spark starts
    options = api.evaluate_options(config, epsilon=args.epsilon, delta=args.delta,
                                   seed=args.seed, solver=settings_from_args(args))
    api.check_evaluation(args.spec, options, dataset=args.dataset, config=config)
    spark = api.get_spark(config)
    try:
        report = api.evaluate(spark, args.dataset, args.spec, epsilon=args.epsilon,
                              delta=args.delta, options=options, config=config,
                              tracking_uri=args.tracking_uri)
    except KeyboardInterrupt as exc:
        if str(exc):  # the run said where it stopped (before or after its release)
            raise
        raise KeyboardInterrupt(
            f"interrupted before the release: nothing was released. A budget reservation it may "
            f"have left open is settled by `gpope budget reconcile --dataset {args.dataset}` "
            f"(`gpope budget show --dataset {args.dataset}` shows what is left); then run the "
            f"evaluation again.") from exc
    # the release is committed: a failure to print it must not invite a second run
    api.show_release(report, lambda: emit(
        args, report.to_dict(include_private=args.print_private_diagnostics), report.summary()))
    return 0
