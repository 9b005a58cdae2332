"""Entry point of the evaluate stage (Databricks task or local): a private GPOPE run.

Usage: python jobs/evaluate.py --conf conf/databricks.yaml --dataset hiv_demo
       --spec conf/specs/hiv_demo.yaml --epsilon 1 --delta 1e-5 [--seed S] [--catalog C --schema S]

Same as the ``gpope-evaluate`` console script (gpope.shell.entrypoints, over gpope.api); every job
also takes --remote sc://HOST:PORT (Spark Connect) and --tracking-uri.
"""

from __future__ import annotations

import sys

from gpope.shell.entrypoints import evaluate

if __name__ == "__main__":
    sys.exit(evaluate())
