"""Entry point of the simulate stage (Databricks task or local): a synthetic cohort -> bronze tables.

Usage: python jobs/simulate.py --domain hiv --patients 500 --dataset hiv_demo [--seed 0]
       [--conf FILE] [--lake PATH] [--catalog CATALOG --schema SCHEMA]
"""

from __future__ import annotations

import sys

from gpope.shell.pipeline.jobargs import job_parser, job_setup


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(__doc__, dataset=True)
    parser.add_argument("--domain", required=True, choices=("chain", "mountaincar", "hiv"))
    parser.add_argument("--patients", type=int, required=True, help="number of patients (episodes)")
    parser.add_argument("--seed", type=int, default=None, help="simulation seed (default: OS entropy)")
    args = parser.parse_args(argv)
    spark, config, _ = job_setup(args)
    from gpope.shell.pipeline.simulate import run_simulate

    report = run_simulate(spark, config, args.dataset, domain=args.domain, patients=args.patients, seed=args.seed)
    print(report.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
