"""Entry point of the ingest stage (Databricks task or local): bronze events -> silver transitions.

Usage: python jobs/ingest.py --conf conf/databricks.yaml --dataset hiv_demo
       [--domain {chain,mountaincar,hiv}] [--lake PATH] [--catalog CATALOG --schema SCHEMA]

Same as the ``gpope-ingest`` console script (gpope.shell.entrypoints, over gpope.api); every job
also takes --remote sc://HOST:PORT (Spark Connect) and --tracking-uri.
"""

from __future__ import annotations

import sys

from gpope.shell.entrypoints import ingest

if __name__ == "__main__":
    sys.exit(ingest())
