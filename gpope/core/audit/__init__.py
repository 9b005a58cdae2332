"""Empirical privacy audits of the private mechanisms: canaries in two neighbouring worlds, a Clopper-Pearson epsilon lower bound beside the claim (docs/AUDIT.md)."""
