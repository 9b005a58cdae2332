"""The Spark pipeline stages: simulate, ingest, stats, evaluate (and the ledger and demo)."""
