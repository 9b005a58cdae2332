"""Entry point of the stats stage (Databricks task or local): silver transitions -> gold trajectory_stats.

Usage: python jobs/stats.py --conf conf/databricks.yaml --dataset hiv_demo --spec conf/specs/hiv_demo.yaml
       [--lake PATH] [--catalog CATALOG --schema SCHEMA]
"""

from __future__ import annotations

import sys

from gpope.shell.pipeline.jobargs import job_parser, job_setup


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(__doc__, dataset=True, spec=True)
    args = parser.parse_args(argv)
    spark, config, spec = job_setup(args)
    from gpope.shell.pipeline.stats import run_stats

    report = run_stats(spark, config, dataset=args.dataset, spec=spec)
    print(report.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
