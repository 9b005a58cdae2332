"""Entry point of the ingest stage (Databricks task or local): bronze events -> silver transitions.

Usage: python jobs/ingest.py --conf conf/databricks.yaml --dataset hiv_demo
       [--domain {chain,mountaincar,hiv}] [--lake PATH] [--catalog CATALOG --schema SCHEMA]
"""

from __future__ import annotations

import sys

from gpope.shell.pipeline.jobargs import job_parser, job_setup


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(__doc__, dataset=True)
    parser.add_argument("--domain", default=None, help="simulated domain of an unconfigured dataset")
    args = parser.parse_args(argv)
    spark, config, _ = job_setup(args)
    from gpope.shell.pipeline.ingest import run_ingest

    report = run_ingest(spark, config, args.dataset, domain=args.domain)
    print(report.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
