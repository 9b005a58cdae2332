"""Entry point of the grants task (Databricks): the analysts' group reads the release tables only.

Usage: python jobs/grants.py --conf conf/databricks.yaml --group gpope-analysts
       --catalog CATALOG --schema SCHEMA

Same as the ``gpope-grants`` console script (gpope.shell.entrypoints).
"""

from __future__ import annotations

import sys

from gpope.shell.entrypoints import grants

if __name__ == "__main__":
    sys.exit(grants())
