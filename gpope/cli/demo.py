"""``gpope demo``: the main job on the embedded default (simulated HIV cohort, end to end)."""

from __future__ import annotations

import argparse

from gpope.cli._common import add_lake_options, config_from_args, emit, show_progress


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``demo`` command."""
    parser = subparsers.add_parser(
        "demo",
        help="the main job: simulate an HIV cohort, ingest, stats, private evaluation, summary",
        description=("Simulate an HIV cohort (Adams et al. 2004 model), write it as bronze EHR "
                     "event tables, ingest it to silver transitions, compute gold trajectory "
                     "statistics with Spark, run a differentially private GPOPE evaluation "
                     "(epsilon 1, delta 1e-5) that reserves its budget in the privacy ledger and "
                     "writes released_estimates and an MLflow run, and print a summary next to "
                     "the simulator's Monte Carlo ground truth. Each run uses a new dataset name "
                     "(a new cohort with its own budget), so it can be repeated."),
    )
    parser.add_argument("--patients", type=int, default=2000, help="patients (default 2000)")
    parser.add_argument("--steps", type=int, default=40,
                        help="decisions recorded per patient (default 40 of the 200)")
    parser.add_argument("--epsilon", type=float, default=1.0, help="epsilon of the evaluation")
    parser.add_argument("--delta", type=float, default=1e-5, help="delta of the evaluation")
    parser.add_argument("--iterations", type=int, default=None,
                        help="GPOPE steps (default: the demo's publicly tuned 20000)")
    parser.add_argument("--dataset", default=None,
                        help="dataset name (default: a fresh hiv_demo_<time>_<random> per run)")
    parser.add_argument("--seed", type=int, default=None,
                        help="simulation seed (the evaluation always uses OS entropy)")
    parser.add_argument("--public-trajectories", type=int, default=100,
                        help="public simulated cohort for MSPBE, the same as gpope evaluate's "
                        "(default 100; 0 disables)")
    parser.add_argument("--allow-invalid-accounting", action="store_true",
                        help="accept evaluation.accountant 'paper' from --conf: the release is "
                        "then NOT private everywhere and labelled 'not a valid bound'")
    add_lake_options(parser, tracking=True, progress=True)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from gpope import api

    options = api.DemoOptions(patients=args.patients, steps=args.steps, epsilon=args.epsilon,
                              delta=args.delta, dataset=args.dataset, seed=args.seed,
                              iterations=args.iterations,
                              public_trajectories=args.public_trajectories,
                              progress=show_progress(args),
                              allow_invalid_accounting=args.allow_invalid_accounting)
    config = config_from_args(args)
    api.check_demo(options, config=config)  # at once, before Spark starts
    spark = api.get_spark(config)
    report = api.demo(spark, options=options, config=config, tracking_uri=args.tracking_uri)
    emit(args, report.to_dict(), report.summary())
    return 0
