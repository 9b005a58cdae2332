"""The three kernels of one PLD evaluation, vectorised: build, self-compose, read epsilon.

Each computes what dp-accounting's ``PLDAccountant`` computes for a Poisson-subsampled Gaussian
under add/remove adjacency, with the same discretisation, truncation and pessimistic rounding,
so every result is the same valid upper bound (equal to dp-accounting's to rounding;
``tests/core/test_accounting_pld_kernels.py`` checks it against dp-accounting's own objects).
They replace dp-accounting's Python loops at fine grids: :func:`step_pmfs` computes all grid
points' connect-the-dots divergences at once, :func:`self_compose` raises the real FFT of the
per-step PMF to the N-th power on the support dp-accounting's Chernoff bound fixes,
:func:`epsilon_for_delta` scans the composed PMF in blocks of cumulative sums. Only
``DensePLDPmf``'s documented fields are read; dp-accounting is pinned below 0.7.
"""

from __future__ import annotations

import math

import numpy as np
from dp_accounting.pld import pld_pmf, privacy_loss_distribution
from dp_accounting.pld import privacy_loss_mechanism as plm
from scipy import fft

__all__ = ["TAIL_MASS", "chernoff_window", "epsilon_for_delta", "self_compose", "step_pmfs"]

TAIL_MASS = 1e-15  # dp-accounting's default tail_mass_truncation of self_compose
_SPARSE_MAX = 1000  # dp-accounting keeps a PMF of at most this many points sparse
_BLOCK = 1 << 16  # points scanned per block by epsilon_for_delta
_UNDERFLOW = -760.0  # exp(x) is exactly 0.0 in float64 for x < -745.2


def _close(values: np.ndarray, edge: float) -> np.ndarray:
    """``math.isclose(v, edge)`` elementwise (relative tolerance 1e-9, symmetric)."""
    return np.abs(values - edge) <= 1e-9 * np.maximum(np.abs(values), abs(edge))


def _inverse_loss(loss: plm.GaussianPrivacyLoss, eps: np.ndarray) -> np.ndarray:
    """dp-accounting's ``inverse_privacy_loss`` at every ``eps`` (inside its domain)."""
    q, s = loss.sampling_prob, loss.sensitivity
    var = loss.standard_deviation ** 2
    log_a, log_minus_c = math.log(1.0 / q), math.log(-(1.0 - 1.0 / q))
    if loss.adjacency_type == plm.AdjacencyType.REMOVE:
        d = eps + log_a  # loss without subsampling: log(exp(eps) / q + 1 - 1 / q)
        x = -0.5 * s - (d + np.log1p(-np.exp(log_minus_c - d))) * var / s
        x[_close(eps, math.log(1.0 - q))] = math.inf
    else:
        d = -eps + log_a  # loss without subsampling: -log(exp(-eps) / q + 1 - 1 / q)
        x = s + (-0.5 * s + (d + np.log1p(-np.exp(log_minus_c - d))) * var / s)
        x[_close(eps, -math.log(1.0 - q))] = -math.inf
    return x


def _deltas(loss: plm.GaussianPrivacyLoss, eps: np.ndarray) -> np.ndarray:
    """``loss.get_delta_for_epsilon(eps)`` computed for all points at once."""
    q = loss.sampling_prob
    deltas = np.zeros_like(eps, dtype=np.float64)
    if loss.adjacency_type == plm.AdjacencyType.ADD:
        inside = eps < -math.log1p(-q)
    else:
        inside = eps > math.log1p(-q)
        deltas[~inside] = -np.expm1(eps[~inside])
    e = eps[inside]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        x = _inverse_loss(loss, e)
        deltas[inside] = loss.mu_upper_cdf(x) - np.exp(e + loss.mu_lower_log_cdf(x))
    return np.clip(deltas, 0.0, 1.0)


def step_pmfs(batch_rate: float, sigma: float, interval: float) -> tuple[pld_pmf.PLDPmf, ...]:
    """The per-step (remove, add) PMFs ``PLDAccountant`` builds for ``PoissonSampledDpEvent(q,
    GaussianDpEvent(sigma))`` under add/remove at grid ``interval`` (sensitivity 1,
    connect-the-dots, pessimistic, log mass truncation -50; one symmetric PMF when q is 1)."""
    if batch_rate >= 1.0:
        return (privacy_loss_distribution.from_gaussian_mechanism(
            standard_deviation=sigma, value_discretization_interval=interval)._pmf_remove,)
    out = []
    for adjacency in (plm.AdjacencyType.REMOVE, plm.AdjacencyType.ADD):
        loss = plm.GaussianPrivacyLoss(sigma, sampling_prob=batch_rate, adjacency_type=adjacency)
        bounds = loss.connect_dots_bounds()
        upper = math.ceil(bounds.epsilon_upper / interval)
        lower = math.floor(bounds.epsilon_lower / interval)
        eps = np.arange(lower, upper + 1) * interval
        out.append(_connect_dots(interval, lower, upper, _deltas(loss, eps)))
    return tuple(out)


def _connect_dots(interval: float, lower: int, upper: int,
                  deltas: np.ndarray) -> pld_pmf.PLDPmf:
    """``create_pmf_pessimistic_connect_dots_fixed_gap`` on the array directly (Doroshenko et al.
    2022, Algorithm 1; dp-accounting detours through a dict above 1000 points); small supports go
    through dp-accounting itself (sparse PMF)."""
    if upper - lower + 1 <= _SPARSE_MAX:
        return pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap(interval, lower, upper,
                                                                      deltas)
    if np.any(np.diff(deltas) > 1e-12):  # dp-accounting's _DELTA_DIFF_TOLERANCE
        raise ValueError("hockey-stick divergences are not non-increasing in epsilon")
    deltas = np.minimum.accumulate(deltas)
    diffs = np.diff(deltas)
    probs = np.zeros_like(deltas)
    probs[0] = 1 - deltas[0] + diffs[0] / math.expm1(interval)
    probs[1:-1] = (diffs[1:] - diffs[:-1] * math.exp(interval)) / math.expm1(interval)
    probs[-1] = diffs[-1] / math.expm1(-interval)
    return pld_pmf.DensePLDPmf(interval, lower, np.maximum(0.0, probs), float(deltas[-1]), True)


def _convolve_bounds(probs: np.ndarray, count: int) -> tuple[int, int]:
    """dp-accounting's ``compute_self_convolve_bounds(probs, count, TAIL_MASS)``, vectorised: the
    Chernoff bound at orders ``k / len(probs)``, k = +-1..20 (exponents in [-20, 20]: summed
    directly), mass above ``upper`` and below ``lower`` at most ``TAIL_MASS / 2`` each."""
    n = len(probs)
    orders = np.concatenate((np.arange(-20, 0), np.arange(1, 21))) / n
    mgf = np.zeros(len(orders))
    for start in range(0, n, _BLOCK):
        p = probs[start:start + _BLOCK]
        mgf += np.exp(np.outer(orders, np.arange(start, start + len(p)))) @ p
    with np.errstate(divide="ignore"):
        return chernoff_window(orders, np.log(mgf), count, n)


def chernoff_window(orders: np.ndarray, log_mgf: np.ndarray, count: int,
                    size: int) -> tuple[int, int]:
    """(lower, upper): the index window outside which the ``count``-fold sum of a PMF on
    ``size`` points has at most ``TAIL_MASS / 2`` on each side, by the Chernoff bound at each
    order (``log_mgf``: the log moment generating function there); dp-accounting's rule."""
    upper, lower = (size - 1) * count, 0
    with np.errstate(divide="ignore", invalid="ignore"):
        bounds = (count * np.asarray(log_mgf, dtype=np.float64)
                  + math.log(2.0 / TAIL_MASS)) / orders
    for order, bound in zip(orders, bounds, strict=True):
        if not math.isfinite(bound):
            continue
        if order > 0:
            upper = min(upper, math.ceil(bound))
        else:
            lower = max(lower, math.floor(bound))
    return lower, upper


def _dense_self_compose(pmf: pld_pmf.DensePLDPmf, count: int) -> pld_pmf.DensePLDPmf:
    """``pmf.self_compose(count)`` (dp-accounting's truncation) with a real FFT."""
    probs = pmf._probs
    lower, upper = _convolve_bounds(probs, count)
    size = upper - lower + 1
    n_fft = fft.next_fast_len(max(size, len(probs)), real=True)
    spectrum = fft.rfft(probs, n_fft)
    # spectrum ** count, as exp(count * log): only where |spectrum| ** count does not underflow
    # (elsewhere exp returns exactly 0 anyway, so skipping it changes no bit)
    with np.errstate(divide="ignore", invalid="ignore", under="ignore"):
        alive = count * np.log(np.abs(spectrum)) > _UNDERFLOW
        powered = np.zeros_like(spectrum)
        powered[alive] = np.exp(count * np.log(spectrum[alive]))
    spectrum = powered
    circular = fft.irfft(spectrum, n_fft)
    start = lower % n_fft  # the window [lower, upper] of the circular result, as np.roll would
    composed = (circular[start:start + size] if start + size <= n_fft else
                np.concatenate((circular[start:], circular[:size - (n_fft - start)])))
    infinity = TAIL_MASS - math.expm1(count * math.log1p(-pmf._infinity_mass))
    return pld_pmf.DensePLDPmf(pmf._discretization, pmf._lower_loss * count + lower, composed,
                               infinity, True)


def self_compose(pmf: pld_pmf.PLDPmf, count: int) -> pld_pmf.DensePLDPmf:
    """``pmf`` composed ``count`` times, as dense, with dp-accounting's truncation. A sparse PMF
    composed many times goes in stages (dp-accounting's dense-vs-sparse test computes ``size **
    count``, millions of digits, at N = 1e6): ``a`` sparse self-compositions until dense, that
    composed ``count // a`` times, then ``count % a`` steps. Every stage truncates pessimistically
    (dropped tail mass goes to the infinity mass), so the result is a valid upper bound."""
    size = pmf.size
    if isinstance(pmf, pld_pmf.DensePLDPmf):
        return _dense_self_compose(pmf, count)
    if count <= 10_000 or size < 2:
        return pmf.self_compose(count, TAIL_MASS).to_dense_pmf()
    a = max(2, math.ceil(math.log(_SPARSE_MAX + 1) / math.log(size)))
    blocks, rest = divmod(count, a)
    out = _dense_self_compose(pmf.self_compose(a, TAIL_MASS).to_dense_pmf(), blocks)
    if rest:
        out = out.compose(pmf.self_compose(rest, TAIL_MASS).to_dense_pmf(),
                          tail_mass_truncation=TAIL_MASS)
    return out


def epsilon_for_delta(pmf: pld_pmf.DensePLDPmf, delta: float) -> float:
    """``pmf.get_epsilon_for_delta(delta)``: dp-accounting's scan (losses from the top down) in
    blocks of cumulative sums; inf when the infinity mass alone exceeds ``delta``."""
    mass_upper = pmf._infinity_mass
    if mass_upper > delta:
        return math.inf
    mass_lower = 0.0
    probs = pmf._probs[::-1]
    top = pmf._lower_loss + len(probs) - 1
    for start in range(0, len(probs), _BLOCK):
        p = probs[start:start + _BLOCK]
        losses = (top - np.arange(start, start + len(p))) * pmf._discretization
        upper = np.cumsum(np.concatenate(([mass_upper], p)))  # upper[k]: before point k
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            lower = np.cumsum(np.concatenate(([mass_lower], np.exp(-losses) * p)))
            stop = (upper[:-1] > delta) & (lower[:-1] > 0) & (
                np.log((upper[:-1] - delta) / lower[:-1]) >= losses)
        huge = (upper[1:] >= delta) & (lower[1:] == 0)  # exp(-loss) underflowed to 0
        k_stop = int(np.argmax(stop)) if stop.any() else len(p)
        k_huge = int(np.argmax(huge)) if huge.any() else len(p)
        if k_huge < k_stop:
            return max(0.0, float(losses[k_huge]))
        if k_stop < len(p):
            mass_upper, mass_lower = float(upper[k_stop]), float(lower[k_stop])
            break
        mass_upper, mass_lower = float(upper[-1]), float(lower[-1])
    if mass_upper <= mass_lower + delta:
        return 0.0
    return math.log((mass_upper - delta) / mass_lower)
