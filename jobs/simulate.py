"""Entry point of the simulate stage (Databricks task or local): a synthetic cohort -> bronze tables.

Usage: python jobs/simulate.py --dataset hiv_demo [--domain hiv] [--patients 2000] [--seed 0]
       [--conf FILE] [--lake PATH] [--catalog CATALOG --schema SCHEMA] [--remote sc://HOST:PORT]

Same as the ``gpope-simulate`` console script (gpope.shell.entrypoints, over gpope.api); every job
also takes --remote sc://HOST:PORT (Spark Connect) and --tracking-uri.
"""

from __future__ import annotations

import sys

from gpope.shell.entrypoints import simulate

if __name__ == "__main__":
    sys.exit(simulate())
