"""Entry point of the demo job (Databricks task or local): simulated HIV cohort end to end.

Usage: python jobs/demo.py [--conf conf/databricks.yaml] [--catalog C --schema S] [--patients K]
"""

from __future__ import annotations

import sys

from gpope.shell.pipeline.jobargs import job_parser, job_setup


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(__doc__)
    parser.add_argument("--patients", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args(argv)
    spark, config, _ = job_setup(args)
    from gpope.shell.pipeline.demo import DemoOptions, run_demo

    options = DemoOptions(patients=args.patients, steps=args.steps, progress=False)
    print(run_demo(spark, config, options=options, tracking_uri=args.tracking_uri).summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
