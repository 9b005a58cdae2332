"""Entry point of the demo job (Databricks task or local): simulated HIV cohort end to end.

Usage: python jobs/demo.py [--conf conf/databricks.yaml] [--catalog C --schema S] [--patients K]

Same as the ``gpope-demo`` console script (gpope.shell.entrypoints, over gpope.api); every job
also takes --remote sc://HOST:PORT (Spark Connect) and --tracking-uri.
"""

from __future__ import annotations

import sys

from gpope.shell.entrypoints import demo

if __name__ == "__main__":
    sys.exit(demo())
