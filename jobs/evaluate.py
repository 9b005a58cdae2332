"""Entry point of the evaluate stage (Databricks task or local): a private GPOPE run.

Usage: python jobs/evaluate.py --conf conf/databricks.yaml --dataset hiv_demo
       --spec conf/specs/hiv_demo.yaml --epsilon 1 --delta 1e-5 [--seed S] [--catalog C --schema S]
"""

from __future__ import annotations

import sys

from gpope.shell.cli.evaluate import add_solver_options, options_from_args
from gpope.shell.pipeline.jobargs import job_parser, job_setup


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(__doc__, dataset=True, spec=True)
    parser.add_argument("--epsilon", type=float, required=True)
    parser.add_argument("--delta", type=float, required=True)
    parser.add_argument("--seed", type=int, default=None, help="fixed seed: NOT private")
    add_solver_options(parser)
    args = parser.parse_args(argv)
    spark, config, spec = job_setup(args)
    from gpope.shell.pipeline.evaluate import run_evaluate

    options = options_from_args(args, config.evaluation, seed=args.seed)
    report = run_evaluate(spark, config, dataset=args.dataset, spec=spec, options=options,
                          tracking_uri=args.tracking_uri)
    print(report.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
