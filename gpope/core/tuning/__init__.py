"""Choosing a spec's clip and step size: on public simulated statistics (public), or inside a run's budget on the private data (private, its settings and scoring)."""
