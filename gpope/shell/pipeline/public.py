"""Public evaluation data: population statistics from a fresh cohort of the spec's simulator.

MSPBE is logged as a metric only when it is computed on PUBLIC data (docs/ARCHITECTURE.md 4). For a spec
with a ``domain``, :func:`public_population` simulates a fresh cohort from that public simulator
with a seed independent of everything private, under the same behaviour policy as the synthetic
datasets of that domain, and returns its population ``(A, b, C)`` under the spec (the core's
statistics). No private row is read.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from gpope.core.spec import EvaluationSpec

__all__ = [
    "PUBLIC_SEED",
    "PUBLIC_TRAJECTORIES",
    "public_cohort",
    "public_cohort_transitions",
    "public_population",
    "public_transitions",
]

#: Seed of the public evaluation cohort (public data: fixing it is harmless and reproducible).
PUBLIC_SEED = 20_240_607
#: Size of the public evaluation cohort, the same in ``gpope evaluate`` and ``gpope demo`` (so
#: their public MSPBE metrics are comparable); episodes have the simulator's default length.
PUBLIC_TRAJECTORIES = 100


def public_transitions(domain: str, n_trajectories: int, rng: np.random.Generator,
                       *, max_length: int | None = None) -> Any:
    """A fresh synthetic cohort (core Transitions) of ``domain`` under its behaviour policy."""
    from gpope.shell.pipeline.simulate import generate_episodes

    return generate_episodes(domain, n_trajectories, rng, n_steps=max_length)


@functools.lru_cache(maxsize=2)
def public_cohort_transitions(domain: str, n_trajectories: int, max_length: int | None = None,
                              seed: int = PUBLIC_SEED) -> Any:
    """The public cohort (Transitions) of ``domain`` simulated from ``seed``, cached: the public
    MSPBE and the SSP clip bound of one run share it instead of simulating it twice."""
    return public_transitions(domain, n_trajectories, np.random.default_rng(seed),
                              max_length=max_length)


def public_population(
    spec: EvaluationSpec, *, n_trajectories: int, max_length: int | None = None,
    seed: int = PUBLIC_SEED,
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Population (A, b, C) of the spec on a public simulated cohort, or None without a domain."""
    if spec.domain is None or n_trajectories <= 0:
        return None
    from gpope.shell.pipeline.stats import statistics_of_transitions

    transitions = public_cohort_transitions(spec.domain, n_trajectories, max_length, seed)
    return statistics_of_transitions(transitions, spec).population()


def public_cohort(
    spec: EvaluationSpec, *, n_trajectories: int = PUBLIC_TRAJECTORIES,
    max_length: int | None = None, seed: int = PUBLIC_SEED,
) -> Any:
    """The public MSPBE cohort of ``spec`` with its definition (a
    :class:`~gpope.shell.pipeline.evaluation_record.PublicCohort`), or None without a domain."""
    from gpope.shell.pipeline.evaluation_record import PublicCohort

    pop = public_population(spec, n_trajectories=n_trajectories, max_length=max_length, seed=seed)
    if pop is None or spec.domain is None:
        return None
    return PublicCohort(domain=spec.domain, n_trajectories=n_trajectories,
                        max_length=max_length, seed=seed, population=pop)
