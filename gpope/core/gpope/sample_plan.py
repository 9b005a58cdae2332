"""The secret sample plan of a GPOPE run: independent streams, chunks, uniform and Poisson batches.

A run's randomness is split into a sampling stream and a noise stream (:func:`split_streams`);
the sampling stream draws the plan (which trajectories each step uses) lazily, ``chunk`` steps at
a time (:func:`draw_plan`, chunk size :func:`plan_chunk_steps`). The core solver and the shell's
streamed driver both consume the plan through these functions, so equal seeds give equal plans
and noise on every path. The plan is as secret as the data and is never returned to a caller
outside the solver.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from gpope.errors import ConfigError

if TYPE_CHECKING:
    from gpope.core.gpope.config import GPOPEConfig

__all__ = ["PlanChunk", "SeedLike", "draw_plan", "plan_chunk_steps", "split_streams"]

_CHUNK_STEPS = 4096
_CHUNK_BYTES = 32 * 2**20
_POISSON_MASK_RATE = 0.05  # above this q, membership is drawn as an (m,) mask per step

SeedLike = np.random.Generator | int | None


def split_streams(rng: SeedLike) -> tuple[np.random.Generator, np.random.Generator, bool]:
    """(sampling generator, noise generator, seeded?) as independent child streams.

    Every GPOPE loop (the core's and the pipeline's streamed driver) splits ``rng`` with this
    function, so equal seeds give equal plans and noise on every path.
    """
    if rng is None:
        a, b = np.random.SeedSequence().spawn(2)
        return np.random.default_rng(a), np.random.default_rng(b), False
    if isinstance(rng, np.random.Generator):
        a, b = rng.spawn(2)
        return a, b, True
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        a, b = np.random.SeedSequence(int(rng)).spawn(2)
        return np.random.default_rng(a), np.random.default_rng(b), True
    raise ConfigError("The 'rng' argument of run_gpope must be a numpy.random.Generator, an int "
                      "seed or None (OS entropy, required for a private run). Got "
                      f"{type(rng).__name__} instead.")


def _poisson_plan(gen: np.random.Generator, m: int, q: float, steps: int,
                  trials: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Poisson batches for `steps` x `trials` (step-major): (members, owner trial, step offsets).

    Each trajectory joins each (step, trial) batch independently with probability q. For small q
    the size is drawn from Binomial(m, q) and the members uniformly without replacement (draw with
    replacement, redraw duplicates: the procedure is label-symmetric, so the set is uniform).
    """
    groups = steps * trials
    if q >= _POISSON_MASK_RATE:
        mask = gen.random((groups, m)) < q
        grp, members = np.nonzero(mask)
    else:
        sizes = gen.binomial(m, q, size=groups)
        grp = np.repeat(np.arange(groups, dtype=np.int64), sizes)
        members = gen.integers(0, m, size=len(grp))
        while True:
            order = np.lexsort((members, grp))
            members = members[order]
            grp = grp[order]
            dup = np.zeros(len(grp), dtype=bool)
            dup[1:] = (members[1:] == members[:-1]) & (grp[1:] == grp[:-1])
            k = int(dup.sum())
            if k == 0:
                break
            members[dup] = gen.integers(0, m, size=k)
    counts = np.bincount(grp // trials, minlength=steps)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return members.astype(np.int64), (grp % trials).astype(np.int64), offsets


@dataclass(frozen=True)
class PlanChunk:
    """The sampled trajectories of steps ``start .. start + steps - 1`` for R trials (secret).

    Attributes:
        start: first step (0-based).
        steps: number of steps L.
        ids: (k,) trajectory ids, step-major (uniform: k = L * R, ids of step s at s*R .. s*R+R-1).
        owner: (k,) trial of each id.
        offsets: (L + 1,) step s uses ids[offsets[s]:offsets[s + 1]].
    """

    start: int
    steps: int
    ids: np.ndarray
    owner: np.ndarray
    offsets: np.ndarray


def plan_chunk_steps(n: int, trials: int, dense: bool) -> int:
    """Steps per chunk of plan and noise draws (bounds the chunk's memory to ~32 MB).

    The chunking decides how the plan stream is consumed (Poisson sizes are drawn per chunk), so
    every loop that must reproduce a run uses this function.
    """
    per_step = trials * 2 * n * 8 + (n * 2 * n * 8 if dense else 0)
    return max(1, min(_CHUNK_STEPS, _CHUNK_BYTES // max(per_step, 1)))


def draw_plan(gen: np.random.Generator, *, m: int, config: GPOPEConfig, chunk: int, trials: int = 1,
              start: int = 0) -> Iterator[PlanChunk]:
    """The sample plan of ``trials`` runs, ``chunk`` steps at a time, from the plan stream ``gen``.

    Lazily drawn: chunk c is drawn when the consumer asks for it, so a loop that interleaves
    other draws from ``gen``'s sibling streams stays reproducible.
    """
    N = config.iterations
    R = trials
    for c0 in range(start, N, chunk):
        L = min(chunk, N - c0)
        if config.sampling == "poisson":
            members, owner, offs = _poisson_plan(gen, m, float(config.batch_rate), L, R)
            yield PlanChunk(c0, L, members, owner, offs)
        else:
            idx = gen.integers(0, m, size=(L, R)).astype(np.int64, copy=False)
            yield PlanChunk(c0, L, idx.reshape(-1), np.tile(np.arange(R, dtype=np.int64), L),
                            np.arange(0, (L + 1) * R, R, dtype=np.int64))
