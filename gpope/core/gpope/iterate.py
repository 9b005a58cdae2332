"""The N stochastic GTD2 steps of GPOPE, over R trials at once (the solver's inner loops).

:func:`iterate` runs the steps with Gaussian noise from a seeded or OS-entropy stream;
:func:`iterate_secure` runs them with discrete Gaussian noise from the OS CSPRNG on the public
grid. Both consume the sample plan of :mod:`gpope.core.gpope.sample_plan` in the same order, start at
x = 0 and return the final iterates, the sum of the averaged thetas and the trace. Single-trial
uniform runs on dense or tabular statistics take a fast path: the compiled loops of
:mod:`gpope.core.gpope.kernels`, or numpy loops with the same arithmetic when numba is unavailable.
"""

from __future__ import annotations

import math

import numpy as np

from gpope.core.gpope.config import GPOPEConfig
from gpope.core.gpope.kernels import StepChunk, dense_steps, poisson_steps
from gpope.core.gpope.sample_plan import draw_plan, plan_chunk_steps
from gpope.core.gpope.steps import step_sizes
from gpope.core.mechanisms.clipping import clip_rows
from gpope.core.mechanisms.secure_noise import (
    round_to_grid,
    rounding_inflation,
    secure_gaussian_noise,
)
from gpope.core.statistics import TrajectoryStats

__all__ = ["iterate", "iterate_secure"]

#: (x (R, 2n), sum of averaged thetas (R, n), trace steps (k,) or None, trace (R, k, 2n) or None)
Iterates = tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]


class _Trace:
    """The iterates at steps 0, k, 2k, ... and N (k = ``trace_every``), filled as the loop runs."""

    def __init__(self, iterations: int, every: int, trials: int, width: int) -> None:
        self.steps = np.unique(np.append(np.arange(0, iterations + 1, every), iterations))
        self.values = np.zeros((trials, len(self.steps), width))
        self.every = every
        self.pos = 1  # step 0 is x = 0

    def after(self, done: int, x: np.ndarray) -> None:
        """Record x if ``done`` steps completed is a multiple of k."""
        if done % self.every == 0:
            self.values[:, self.pos] = x
            self.pos += 1

    def result(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) with the final iterate x as the last entry."""
        self.values[:, -1] = x
        return self.steps, self.values


def _start(stats: TrajectoryStats, config: GPOPEConfig,
           R: int) -> tuple[np.ndarray, int, np.ndarray, np.ndarray, _Trace | None, float, int]:
    """The loops' common start: (step sizes, first averaged step, x, acc, trace, divisor, chunk)."""
    n, m, N = stats.n, stats.m, config.iterations
    betas = step_sizes(N, config.step_size, config.step_schedule, config.step_offset)
    avg_from = N - config.averaged_iterations if config.averaging != "none" else N
    every = config.trace_every
    trace = None if every is None else _Trace(N, every, R, 2 * n)
    poisson = config.sampling == "poisson"
    div = float(config.batch_rate) * (config.normalizing_size or m) if poisson else 1.0
    chunk = plan_chunk_steps(n, R, stats.representation == "dense")
    return betas, avg_from, np.zeros((R, 2 * n)), np.zeros((R, n)), trace, div, chunk


def _finish(x: np.ndarray, acc: np.ndarray, trace: _Trace | None) -> Iterates:
    if trace is None:
        return x, acc, None, None
    return x, acc, *trace.result(x)


def iterate(stats: TrajectoryStats, config: GPOPEConfig, gen_plan: np.random.Generator,
            gen_noise: np.random.Generator, R: int, h: float | None, noise_std: float) -> Iterates:
    """The N steps with Gaussian noise of std ``noise_std`` from ``gen_noise`` (0: no noise),
    gradients clipped to ``h`` (None: no clipping)."""
    n, m = stats.n, stats.m
    betas, avg_from, x, acc, trace, div, chunk = _start(stats, config, R)
    every = config.trace_every
    poisson = config.sampling == "poisson"
    fast = (R == 1 and not poisson and every is None
            and stats.representation in ("dense", "tabular"))
    clip_h = math.inf if h is None else float(h)
    compiled_poisson = poisson
    for plan in draw_plan(gen_plan, m=m, config=config, chunk=chunk, trials=R):
        c0, L = plan.start, plan.steps
        beta = betas[c0 : c0 + L]
        if poisson:
            members, owner, offs = plan.ids, plan.owner, plan.offsets
        else:
            idx = plan.ids.reshape(L, R)
        if noise_std > 0:
            z = gen_noise.standard_normal((L, R, 2 * n))
            z *= (beta * (noise_std / div))[:, None, None]
        else:
            z = None
        if fast:
            chunk_steps = (_fast_tabular_chunk if stats.representation == "tabular"
                           else _fast_dense_chunk)
            chunk_steps(stats, idx[:, 0], StepChunk(x[0], acc[0], beta, clip_h,
                                                    None if z is None else z[:, 0], c0, avg_from))
            continue
        if poisson and compiled_poisson:
            s0 = 0
            while s0 < L:
                s1 = L if every is None else min(L, every - (c0 + s0) % every + s0)
                compiled_poisson = poisson_steps(stats, members, owner, offs, s0, s1, x, acc,
                                                 beta, div, clip_h, z, c0, avg_from)
                if not compiled_poisson:
                    break
                if trace is not None:
                    trace.after(c0 + s1, x)
                s0 = s1
            if compiled_poisson:
                continue
        for s in range(L):
            if poisson:
                lo, hi = offs[s], offs[s + 1]
                tr = owner[lo:hi]
                g = clip_rows(stats._grad_x(members[lo:hi], x[tr]), h)
                upd = np.zeros((R, 2 * n))
                np.add.at(upd, tr, g)
                x -= (beta[s] / div) * upd
            else:
                x -= beta[s] * clip_rows(stats._grad_x(idx[s], x), h)
            if z is not None:
                x -= z[s]
            if c0 + s >= avg_from:
                acc += x[:, :n]
            if trace is not None:
                trace.after(c0 + s + 1, x)
    return _finish(x, acc, trace)


def iterate_secure(stats: TrajectoryStats, config: GPOPEConfig, gen_plan: np.random.Generator,
                   R: int, noise_std: float) -> Iterates:
    """The N steps with secure noise: per step, the clipped sum is rounded to the public grid,
    discrete Gaussian noise (OS CSPRNG, std raised by :func:`rounding_inflation`) is added on the
    grid, then the iterate moves by ``beta / d`` times the noisy sum. Same plan as :func:`iterate`.
    """
    n, m = stats.n, stats.m
    grid = config.secure_grid(noise_std)
    std = noise_std * rounding_inflation(float(config.clip), grid, 2 * n)
    betas, avg_from, x, acc, trace, div, chunk = _start(stats, config, R)
    for plan in draw_plan(gen_plan, m=m, config=config, chunk=chunk, trials=R):
        noise = secure_gaussian_noise((plan.steps, R, 2 * n), std, grid) if std > 0 else None
        for s in range(plan.steps):
            lo, hi = plan.offsets[s], plan.offsets[s + 1]
            tr = plan.owner[lo:hi]
            g = clip_rows(stats._grad_x(plan.ids[lo:hi], x[tr]), config.clip)
            total = np.zeros((R, 2 * n))
            np.add.at(total, tr, g)
            total = round_to_grid(total, grid)
            if noise is not None:
                total += noise[s]
            x -= (betas[plan.start + s] / div) * total
            if plan.start + s >= avg_from:
                acc += x[:, :n]
            if trace is not None:
                trace.after(plan.start + s + 1, x)
    return _finish(x, acc, trace)


def _fast_dense_chunk(stats: TrajectoryStats, idx: np.ndarray, chunk: StepChunk) -> None:
    """Single-trial uniform steps of trajectories ``idx`` on dense stats, in place on ``chunk``.

    Gathers the chunk's [A_j | C_j] blocks once (the read floor), then runs the sequential steps on
    views with a handful of small BLAS calls each.
    """
    n = stats.n
    blocks = stats._ac[idx]  # (L, n, 2n)
    bs = stats._b[idx]  # (L, n)
    if dense_steps(blocks, bs, chunk):
        return
    x, acc, beta, h, z, c0, avg_from = chunk
    theta = x[:n]
    w = x[n:]
    gw = np.empty(n)
    gt = np.empty(n)
    for s in range(len(idx)):
        blk = blocks[s]
        np.matmul(blk, x, out=gw)
        gw -= bs[s]
        np.matmul(w, blk[:, :n], out=gt)  # A^T w; the theta gradient is -gt
        gt, gw, f = _clipped_factor(gt, gw, h, beta[s], 1.0)
        theta += f * gt
        w -= f * gw
        if z is not None:
            x -= z[s]
        if c0 + s >= avg_from:
            acc += theta


def _fast_tabular_chunk(stats: TrajectoryStats, idx: np.ndarray, chunk: StepChunk) -> None:
    """Single-trial uniform steps on tabular stats: rows of the chunk gathered once, O(tau) a step.

    Same arithmetic as ``TrajectoryStats._grad_x`` for one trajectory at a time.
    """
    x, acc, beta, h, z, c0, avg_from = chunk
    n = stats.n
    lens = stats.tau[idx]
    ends = np.cumsum(lens)
    seg = ends - lens
    rows = np.repeat(stats._offsets[idx] - seg, lens) + np.arange(int(ends[-1]))
    s_all = stats._s[rows]
    sn_all = stats._sn[rows]
    gn_all = stats._gn[rows]
    norms = stats._norm[idx]
    rw_all = np.repeat(norms, lens)
    if stats._rho is not None:
        rw_all *= stats._rho[rows]
    bs = stats._b[idx]
    theta = x[:n]
    w = x[n:]
    bincount = np.bincount
    for k in range(len(idx)):
        lo, hi = seg[k], ends[k]
        s = s_all[lo:hi]
        sn = sn_all[lo:hi]
        gn = gn_all[lo:hi]
        rw = rw_all[lo:hi]
        pw = w[s]
        et = theta[s] - gn * theta[sn]
        q = rw * pw
        gt = bincount(sn, q * gn, n) - bincount(s, q, n)  # theta gradient -A^T w
        gw = bincount(s, rw * et + norms[k] * pw, n) - bs[k]
        gt, gw, f = _clipped_factor(gt, gw, h, beta[k], -1.0)
        theta -= f * gt
        w -= f * gw
        if z is not None:
            x -= z[k]
        if c0 + k >= avg_from:
            acc += theta


def _clipped_factor(gt: np.ndarray, gw: np.ndarray, h: float, beta: float,
                    sign: float) -> tuple[np.ndarray, np.ndarray, float]:
    """(gt, gw, f): the step is f times the parts, ``beta`` times [gt; gw] clipped to norm h.

    The common case only scales (f = beta, or beta h / norm; the parts come back as given).
    When the squared norm overflowed or is NaN, the parts are replaced by the total clip of
    :func:`gpope.core.mechanisms.clipping.clip_rows` applied to [sign * gt; gw] (``sign`` the orientation
    of the caller's theta part), and f = beta.
    """
    nrm = math.sqrt(float(gt @ gt) + float(gw @ gw))
    if nrm <= h:
        return gt, gw, beta
    if nrm < math.inf:
        return gt, gw, beta * h / nrm
    n = len(gt)
    with np.errstate(all="ignore"):
        g = clip_rows(np.concatenate([sign * gt, gw])[None, :], h)[0]
    return sign * g[:n], g[n:], beta
