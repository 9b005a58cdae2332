"""Cohorts of a domain's simulator under its behaviour policy, and the public cohort of a spec.

:func:`generate_episodes` draws the episodes of simulated datasets and of public cohorts, batch
by batch from one generator. MSPBE is logged as a metric only when it is computed on PUBLIC data
(docs/ARCHITECTURE.md 4): for a spec with a ``domain``, :func:`public_cohort` simulates a fresh
cohort from that public simulator with a seed independent of everything private, under the same
behaviour policy as the synthetic datasets of that domain, and holds its population ``(A, b, C)``
under the spec. No private row is read.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import numpy as np

from gpope.core.envs.registry import get_domain
from gpope.core.validation import check_int

if TYPE_CHECKING:
    from gpope.core.policies import Policy
    from gpope.core.spec import EvaluationSpec
    from gpope.core.trajectories.transitions import Transitions

__all__ = ["PUBLIC_SEED", "PUBLIC_TRAJECTORIES", "PublicCohort", "behaviour_policy",
           "check_domain", "concatenate_episodes", "generate_episodes", "public_cohort", "public_cohort_transitions",
           "public_transitions"]

#: Seed of the public evaluation cohort (public data: fixing it is harmless and reproducible).
PUBLIC_SEED = 20_240_607
#: Size of the public evaluation cohort, the same in ``gpope evaluate`` and ``gpope demo`` (so
#: their public MSPBE metrics are comparable); episodes have the simulator's default length.
PUBLIC_TRAJECTORIES = 100


def check_domain(domain: object) -> str:
    """``domain`` if the registry knows it (:func:`gpope.core.envs.registry.get_domain`)."""
    return get_domain(domain).name  # type: ignore[arg-type]


def behaviour_policy(domain: str) -> Policy | None:
    """The behaviour policy of ``domain`` (None for the chain, whose only action has probability 1,
    and for generated MDPs, whose simulator logs its own).

    Raises:
        ConfigError: unknown domain, or a stored policy artifact is missing.
    """
    return get_domain(domain).behaviour()


def concatenate_episodes(parts: list[Transitions]) -> Transitions:
    """The episodes of ``parts`` as one batch, trajectory indices renumbered in order."""
    from gpope.core.trajectories.transitions import Transitions

    if len(parts) == 1:
        return parts[0]
    shifts = np.cumsum([0] + [p.n_trajectories for p in parts[:-1]])
    columns = {f.name: np.concatenate([getattr(p, f.name) for p in parts])
               for f in fields(Transitions) if f.name not in ("traj_index", "n_trajectories")}
    return Transitions(
        traj_index=np.concatenate([p.traj_index + s for p, s in zip(parts, shifts, strict=True)]),
        n_trajectories=int(sum(p.n_trajectories for p in parts)), **columns)


def generate_episodes(domain: str, patients: int, rng: np.random.Generator, *,
                      policy: Policy | None = None, n_steps: int | None = None,
                      batch_size: int = 1000) -> Transitions:
    """``patients`` episodes (trajectories 0..m-1) of a registered ``domain`` under ``policy``
    (None: the domain's behaviour policy), capped at ``n_steps`` (None: the domain's), generated
    ``batch_size`` patients at a time from ``rng`` in order (deterministic for a seed)."""
    entry = get_domain(domain)
    m = check_int("generate_episodes", "patients", patients, ge=1)
    batch_size = check_int("generate_episodes", "batch_size", batch_size, ge=1)
    if policy is None:
        policy = entry.behaviour()
    return concatenate_episodes([entry.generate(min(batch_size, m - start), rng, policy,
                                        n_steps or entry.max_steps)
                         for start in range(0, m, batch_size)])


def public_transitions(domain: str, n_trajectories: int, rng: np.random.Generator,
                       *, max_length: int | None = None) -> Transitions:
    """A fresh synthetic cohort of ``domain`` under its behaviour policy."""
    return generate_episodes(domain, n_trajectories, rng, n_steps=max_length)


@functools.lru_cache(maxsize=2)
def public_cohort_transitions(domain: str, n_trajectories: int, max_length: int | None = None,
                              seed: int = PUBLIC_SEED) -> Transitions:
    """The public cohort of ``domain`` simulated from ``seed``, cached: the public MSPBE and the
    SSP clip bound of one run share it instead of simulating it twice."""
    return public_transitions(domain, n_trajectories, np.random.default_rng(seed),
                              max_length=max_length)


@dataclass(frozen=True)
class PublicCohort:
    """The public simulated cohort public MSPBE is measured on (the same definition everywhere).

    Attributes:
        domain: the spec's simulator.
        n_trajectories, max_length, seed: the cohort's definition (all public).
        population: its population statistics (A, b, C) under the spec.
    """

    domain: str
    n_trajectories: int
    max_length: int | None
    seed: int
    population: tuple[np.ndarray, np.ndarray, np.ndarray]


def public_cohort(spec: EvaluationSpec, *, n_trajectories: int = PUBLIC_TRAJECTORIES,
                  max_length: int | None = None, seed: int = PUBLIC_SEED) -> PublicCohort | None:
    """The public MSPBE cohort of ``spec`` with its definition, or None without a domain (or for
    an empty cohort)."""
    if spec.domain is None or n_trajectories <= 0:
        return None
    from gpope.core.trajectories.batch import statistics_of_transitions

    transitions = public_cohort_transitions(spec.domain, n_trajectories, max_length, seed)
    pop = statistics_of_transitions(transitions, spec).population()
    return PublicCohort(domain=spec.domain, n_trajectories=n_trajectories,
                        max_length=max_length, seed=seed, population=pop)
