"""The GPOPE driver loop for statistics that do not fit in memory: fed in sample-plan order.

:func:`gpope.core.gpope.solver.run_gpope` needs all m statistics in memory. When they do not fit, the
evaluation draws the sample plan on the driver, fetches only the sampled trajectories' statistics
in plan order (bounded blocks, see :mod:`gpope.shell.pipeline.sampled`) and runs this loop, which
mirrors the core solver step for step: the same two random streams (plan and noise) split the same
way, the same chunking of the plan draws, the same clip / noise / update arithmetic. With the same
statistics and seed it releases the same theta as ``run_gpope`` (to floating-point rounding; a
test checks it), so the privacy analysis of the core applies unchanged.

The plan (which trajectories each step used) never leaves this process: it is not returned,
logged or written.

The plan, the stream split, the chunking and the clip are the core's public pieces
(:func:`~gpope.core.gpope.sample_plan.split_streams`, :func:`~gpope.core.gpope.sample_plan.draw_plan`,
:func:`~gpope.core.gpope.sample_plan.plan_chunk_steps`, :func:`~gpope.core.mechanisms.clipping.clip_rows`), so both paths
consume the random streams identically by construction.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from gpope.core.gpope.iterate import _Trace
from gpope.core.gpope.sample_plan import PlanChunk, draw_plan, plan_chunk_steps, split_streams
from gpope.core.gpope.solver import GPOPEConfig, GPOPEResult, run_privacy
from gpope.core.gpope.steps import step_sizes
from gpope.core.mechanisms.clipping import clip_rows
from gpope.core.statistics import TrajectoryStats
from gpope.errors import ConfigError

__all__ = ["run_gpope_streamed"]

#: fetch(ids) -> statistics of those trajectories, row r = ids[r] (ids in plan order, repeats kept).
Fetcher = Callable[[np.ndarray], TrajectoryStats]


@dataclass(frozen=True)
class _Piece:
    """Steps ``lo .. hi - 1`` of one plan chunk: the unit a fetch block is made of."""

    chunk: PlanChunk
    lo: int
    hi: int

    @property
    def first(self) -> int:
        """Position in ``chunk.ids`` of this piece's first id."""
        return int(self.chunk.offsets[self.lo])

    @property
    def rows(self) -> int:
        return int(self.chunk.offsets[self.hi]) - self.first

    @property
    def ids(self) -> np.ndarray:
        return self.chunk.ids[self.first : int(self.chunk.offsets[self.hi])]


def _pieces(chunk: PlanChunk, max_rows: int) -> list[_Piece]:
    """Split a chunk's steps into runs of consecutive steps holding at most ``max_rows`` ids.

    A single step with more ids than ``max_rows`` is a piece of its own (one step's batch must be
    in memory at once). The chunk itself stays the unit of the plan and noise draws, so splitting
    it changes which rows are fetched together, never the random streams.
    """
    offsets = np.asarray(chunk.offsets, dtype=np.int64)
    out: list[_Piece] = []
    lo = 0
    while lo < chunk.steps:
        hi = int(np.searchsorted(offsets, offsets[lo] + max_rows, side="right")) - 1
        hi = min(chunk.steps, max(lo + 1, hi))
        out.append(_Piece(chunk, lo, hi))
        lo = hi
    return out


def _blocks(chunks: list[PlanChunk], max_rows: int) -> list[list[_Piece]]:
    """Fetch blocks: consecutive pieces of at most ``max_rows`` ids in all (one piece at least).

    Blocks are cut inside chunks, so one fetch never exceeds ``max_rows`` ids whatever the Poisson
    batch size: a whole chunk of a large batch (chain, m = 1e6: 1,278 steps of about 1,000 ids)
    would be 1.3e6 dense rows, more than the driver JVM's heap holds.
    """
    blocks: list[list[_Piece]] = []
    rows = 0
    for c in chunks:
        for p in _pieces(c, max_rows):
            if blocks and rows + p.rows <= max_rows:
                blocks[-1].append(p)
                rows += p.rows
            else:
                blocks.append([p])
                rows = p.rows
    return blocks


def run_gpope_streamed(fetch: Fetcher, config: GPOPEConfig, rng: np.random.Generator | int | None,
                       *, m: int, n: int, sigma: float, epsilon: float | None, accountant: str,
                       max_rows_per_fetch: int = 4096) -> GPOPEResult:
    """One GPOPE run (one trial) whose statistics arrive from ``fetch`` in plan order: a
    GPOPEResult equal (to rounding) to ``run_gpope`` on the same statistics and seed.

    ``config.noise_multiplier`` must be the caller's calibrated ``sigma``; ``epsilon`` and
    ``accountant`` are reported as given; at most ``max_rows_per_fetch`` sampled rows are fetched
    (and held) at once, the next block in a background thread while the current one runs.
    """
    if config.noise_multiplier is None or float(config.noise_multiplier) != float(sigma):
        raise ConfigError("run_gpope_streamed needs config.noise_multiplier set to the calibrated "
                          f"sigma ({sigma}); got {config.noise_multiplier!r}.")
    gen_plan, gen_noise, seeded = split_streams(rng)
    N = config.iterations
    h = config.clip
    noise_std = 0.0 if h is None else h * float(sigma)
    betas = step_sizes(N, config.step_size, config.step_schedule, config.step_offset)
    avg_count = config.averaged_iterations
    avg_from = N - avg_count if config.averaging != "none" else N
    every = config.trace_every
    poisson = config.sampling == "poisson"
    div = float(config.batch_rate) * (config.normalizing_size or m) if poisson else 1.0
    trace = None if every is None else _Trace(N, every, 1, 2 * n)
    x = np.zeros((1, 2 * n))
    acc = np.zeros((1, n))

    # The in-memory path holds dense statistics: chunk exactly as the core does for them.
    chunks = list(draw_plan(gen_plan, m=m, config=config, chunk=plan_chunk_steps(n, 1, True)))
    blocks = _blocks(chunks, max(1, int(max_rows_per_fetch)))

    def load(block: list[_Piece]) -> TrajectoryStats | None:
        ids = np.concatenate([p.ids for p in block])
        return fetch(ids) if len(ids) else None

    pool = ThreadPoolExecutor(max_workers=1)
    try:
        pending: Future | None = pool.submit(load, blocks[0]) if blocks else None
        for b_i, block in enumerate(blocks):
            stats = pending.result()  # type: ignore[union-attr]
            if b_i + 1 < len(blocks):
                pending = pool.submit(load, blocks[b_i + 1])
            base = 0
            for p in block:
                c = p.chunk
                if p.lo == 0:  # a new chunk: its step sizes and noise, drawn as the core does
                    L = c.steps
                    beta = betas[c.start : c.start + L]
                    if noise_std > 0:
                        z = gen_noise.standard_normal((L, 1, 2 * n))
                        z *= (beta * (noise_std / div))[:, None, None]
                    else:
                        z = None
                for s in range(p.lo, p.hi):
                    lo = base + int(c.offsets[s]) - p.first
                    hi = base + int(c.offsets[s + 1]) - p.first
                    if poisson:
                        upd = np.zeros((1, 2 * n))
                        if hi > lo:
                            g = clip_rows(stats.gradients(np.arange(lo, hi), x[0, :n], x[0, n:]), h)
                            np.add.at(upd, np.zeros(hi - lo, dtype=np.int64), g)
                        x -= (beta[s] / div) * upd
                    else:
                        g = stats.gradients(np.arange(lo, hi), x[0, :n], x[0, n:])
                        x -= beta[s] * clip_rows(g, h)
                    if z is not None:
                        x -= z[s]
                    if c.start + s >= avg_from:
                        acc += x[:, :n]
                    if trace is not None:
                        trace.after(c.start + s + 1, x)
                base += p.rows
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        del chunks, blocks
    trace_steps, values = (None, None) if trace is None else trace.result(x)
    private, note = run_privacy(config, seeded)
    return GPOPEResult(
        theta=x[0, :n].copy(), w=x[0, n:].copy(),
        theta_avg=None if config.averaging == "none" else acc[0] / avg_count, sigma=float(sigma),
        epsilon=epsilon, delta=config.delta, accountant=accountant, sampling=config.sampling,
        iterations=N, clip=config.clip, private=private, privacy_note=note,
        trace_steps=trace_steps,
        trace_theta=None if values is None else values[0, :, :n].copy(),
        trace_w=None if values is None else values[0, :, n:].copy())
