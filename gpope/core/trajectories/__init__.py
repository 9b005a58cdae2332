"""Trajectories as the core holds them: the transitions contract and the per-trajectory statistics in their storage layouts."""
