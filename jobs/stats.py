"""Entry point of the stats stage (Databricks task or local): silver transitions -> gold trajectory_stats.

Usage: python jobs/stats.py --conf conf/databricks.yaml --dataset hiv_demo --spec conf/specs/hiv_demo.yaml
       [--lake PATH] [--catalog CATALOG --schema SCHEMA]

Same as the ``gpope-stats`` console script (gpope.shell.entrypoints, over gpope.api); every job
also takes --remote sc://HOST:PORT (Spark Connect) and --tracking-uri.
"""

from __future__ import annotations

import sys

from gpope.shell.entrypoints import stats

if __name__ == "__main__":
    sys.exit(stats())
