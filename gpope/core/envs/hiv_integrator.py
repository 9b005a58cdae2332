"""The vectorised DOP853 integrator of the HIV model (:mod:`gpope.core.envs.hiv`).

:func:`integrate` advances k patients over one decision interval with one adaptive step size per
patient and purely relative error control: a loop over patients compiled with numba
(:func:`_compiled_integrator`), or, without numba or with ``GPOPE_NO_JIT=1``, the same arithmetic
in numpy vectorised over patients (:func:`_integrate_numpy`). The right-hand side is the model of
:mod:`gpope.core.envs.hiv` written in place from per-patient constants (:func:`coefficients`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
from scipy.integrate._ivp import dop853_coefficients as _dop853

from gpope.core.jit import numba_module
from gpope.errors import DataError

__all__ = ["coefficients", "integrate", "rhs_into"]


def coefficients(e1: np.ndarray | float, e2: np.ndarray | float, p: dict) -> dict:
    """Per-patient constants of one decision interval (drugs fixed), for :func:`rhs_into`."""
    a1 = (1.0 - e1) * p["k1"]
    a2 = (1.0 - p["f"] * e1) * p["k2"]
    return {
        "l1": p["l1"], "d1": p["d1"], "a1": a1, "l2": p["l2"], "d2": p["d2"], "a2": a2,
        "delta": p["delta"], "m1": p["m1"], "m2": p["m2"], "prod": (1.0 - e2) * p["NT"] * p["delta"],
        "c": p["c"], "b1": p["rho1"] * a1, "b2": p["rho2"] * a2, "lE": p["lE"], "bE": p["bE"],
        "Kb": p["Kb"], "dE": p["dE"], "Kd": p["Kd"], "deltaE": p["deltaE"],
    }


def rhs_into(x: np.ndarray, q: dict, out: np.ndarray) -> np.ndarray:
    """dx/dt of the model (:mod:`gpope.core.envs.hiv`) at raw states ``x`` (6, k), written into
    ``out`` (6, k), from :func:`coefficients`."""
    T1, T2, T1s, T2s, V, E = x
    inf1 = q["a1"] * V * T1
    inf2 = q["a2"] * V * T2
    infected = T1s + T2s
    np.subtract(q["l1"] - q["d1"] * T1, inf1, out=out[0])
    np.subtract(q["l2"] - q["d2"] * T2, inf2, out=out[1])
    np.subtract(inf1, (q["delta"] + q["m1"] * E) * T1s, out=out[2])
    np.subtract(inf2, (q["delta"] + q["m2"] * E) * T2s, out=out[3])
    np.subtract(q["prod"] * infected, (q["c"] + q["b1"] * T1 + q["b2"] * T2) * V, out=out[4])
    rate = q["bE"] * infected / (infected + q["Kb"]) - q["dE"] * infected / (infected + q["Kd"])
    np.add(q["lE"], (rate - q["deltaE"]) * E, out=out[5])
    return out


# DOP853 (Hairer, Norsett & Wanner, Solving ODEs I, sec. II.10): the tableau shipped with scipy.
_N_STAGES = _dop853.N_STAGES
_A = np.asarray(_dop853.A[:_N_STAGES, :_N_STAGES])
_B = np.asarray(_dop853.B)
_E3 = np.asarray(_dop853.E3)
_E5 = np.asarray(_dop853.E5)
_A_C = np.ascontiguousarray(_A)  # C layout for the compiled integrator


def _combine(coeffs: np.ndarray, K: np.ndarray) -> np.ndarray:
    """sum_j coeffs[j] K[j] by multiply-adds (not BLAS: its thread start-up dominates at these sizes)."""
    out = coeffs[0] * K[0]
    for c, Kj in zip(coeffs[1:], K[1:], strict=False):
        if c != 0.0:
            out += c * Kj
    return out


def _subset(p: dict, idx: np.ndarray) -> dict:
    return {k: (v[idx] if isinstance(v, np.ndarray) else v) for k, v in p.items()}


def integrate(x0: np.ndarray, e1: np.ndarray, e2: np.ndarray, p: dict, duration: float,
              rtol: float) -> np.ndarray:
    """(6, k) raw states after DOP853 over ``duration`` days from (6, k) raw states, at (k,)
    efficacies and parameters (each a float or a (k,) array), one adaptive step size per patient.

    Each patient's step is accepted or rejected on its own error norm (scipy's DOP853 norm with
    scale ``rtol * max(|y|, |y_new|)`` per component: purely relative error control), so patients
    are independent: the compiled loop (:func:`_compiled_integrator`, one patient at a time) and
    the numpy loop (:func:`_integrate_numpy`, all patients still running share each stage
    evaluation) run the same steps with the same arithmetic.
    """
    fn = _compiled_integrator()
    if fn is None:
        return _integrate_numpy(x0, e1, e2, p, duration, rtol)
    y = np.array(x0, dtype=np.float64, copy=True, order="C")
    k = y.shape[1]
    q = coefficients(e1, e2, p)
    coef = np.empty((len(_COEF_NAMES), k))
    for i, name in enumerate(_COEF_NAMES):
        coef[i] = q[name]  # float or (k,) array
    failed = fn(y, coef, _A_C, _B, _E3, _E5, float(duration), float(rtol), _MAX_STEPS)
    if failed >= 0:  # pragma: no cover - defensive
        raise DataError(f"HIV integration did not finish within {_MAX_STEPS} steps.")
    return y


#: Order of the per-patient constants of :func:`coefficients` in the compiled integrator.
_COEF_NAMES: tuple[str, ...] = ("l1", "d1", "a1", "l2", "d2", "a2", "delta", "m1", "m2", "prod",
                                "c", "b1", "b2", "lE", "bE", "Kb", "dE", "Kd", "deltaE")
#: Most integration steps of one patient over one interval.
_MAX_STEPS = 100_000


@functools.cache
def _compiled_integrator() -> Callable | None:
    """The per-patient DOP853 loop compiled with numba (None with ``GPOPE_NO_JIT`` or no numba):
    the numpy loop's operations in the same order (zero tableau coefficients skipped), on scalars.
    """
    numba = numba_module()
    if numba is None:
        return None

    @numba.njit(cache=True, nogil=True)
    def integrate(y, q, A, B, E3, E5, duration, rtol, max_steps):  # pragma: no cover - compiled
        # _integrate_numpy for each patient (column of y) on its own; y is updated in place.
        # Returns -1, or the first patient that needed more than max_steps steps.
        def rhs(x, q, i, out):  # pragma: no cover - compiled
            # rhs_into for patient i: x (6,) raw state, q (19, k) constants in _COEF_NAMES order.
            T1, T2, T1s, T2s, V, E = x[0], x[1], x[2], x[3], x[4], x[5]
            inf1 = q[2, i] * V * T1
            inf2 = q[5, i] * V * T2
            infected = T1s + T2s
            out[0] = (q[0, i] - q[1, i] * T1) - inf1
            out[1] = (q[3, i] - q[4, i] * T2) - inf2
            out[2] = inf1 - (q[6, i] + q[7, i] * E) * T1s
            out[3] = inf2 - (q[6, i] + q[8, i] * E) * T2s
            out[4] = q[9, i] * infected - (q[10, i] + q[11, i] * T1 + q[12, i] * T2) * V
            rate = q[14, i] * infected / (infected + q[15, i]) - q[16, i] * infected / (infected + q[17, i])
            out[5] = q[13, i] + (rate - q[18, i]) * E

        n_stages = B.shape[0]
        K = np.empty((n_stages + 1, 6))
        ya = np.empty(6)
        arg = np.empty(6)
        y_new = np.empty(6)
        fy = np.empty(6)
        for i in range(y.shape[1]):
            for c in range(6):
                ya[c] = y[c, i]
            rhs(ya, q, i, fy)
            t = 0.0
            h = 0.1
            done = False
            for _ in range(max_steps):
                remaining = duration - t
                ha = h if (h < remaining or h != h) else remaining  # np.minimum (NaN wins)
                for c in range(6):
                    K[0, c] = fy[c]
                for s in range(1, n_stages):
                    for c in range(6):
                        acc = A[s, 0] * K[0, c]
                        for j in range(1, s):
                            if A[s, j] != 0.0:
                                acc += A[s, j] * K[j, c]
                        arg[c] = ya[c] + ha * acc
                    rhs(arg, q, i, K[s])
                for c in range(6):
                    acc = B[0] * K[0, c]
                    for j in range(1, n_stages):
                        if B[j] != 0.0:
                            acc += B[j] * K[j, c]
                    y_new[c] = ya[c] + ha * acc
                rhs(y_new, q, i, K[n_stages])
                err5 = 0.0
                err3 = 0.0
                ok = True
                for c in range(6):
                    big = abs(ya[c]) if abs(ya[c]) > abs(y_new[c]) else abs(y_new[c])
                    if y_new[c] != y_new[c]:  # np.maximum (NaN wins)
                        big = y_new[c]
                    scale = rtol * big + 1e-300
                    a5 = E5[0] * K[0, c]
                    a3 = E3[0] * K[0, c]
                    for j in range(1, n_stages + 1):
                        if E5[j] != 0.0:
                            a5 += E5[j] * K[j, c]
                        if E3[j] != 0.0:
                            a3 += E3[j] * K[j, c]
                    err5 += (a5 / scale) ** 2
                    err3 += (a3 / scale) ** 2
                    if not (np.isfinite(y_new[c]) and y_new[c] > 0.0):
                        ok = False
                denom = err5 + 0.01 * err3 if err5 + err3 > 0 else 1.0
                err_norm = ha * err5 / np.sqrt(denom * 6)
                ok = ok and err_norm <= 1.0
                if err_norm == 0.0:
                    factor = 10.0
                else:  # np.clip(0.9 * err_norm ** (-1 / 8), 0.2, 10.0), NaN propagating
                    factor = 0.9 * err_norm ** (-1 / 8)
                    if factor < 0.2:
                        factor = 0.2
                    elif factor > 10.0:
                        factor = 10.0
                if not ok and not factor <= 0.5:  # np.minimum(factor, 0.5) (NaN wins)
                    factor = factor if factor != factor else 0.5
                if ok:
                    for c in range(6):
                        ya[c] = y_new[c]
                        fy[c] = K[n_stages, c]
                    if ha >= remaining:
                        done = True
                        break
                    t = t + ha
                h = ha * factor
            if not done:
                return i
            for c in range(6):
                y[c, i] = ya[c]
        return -1

    return integrate


def _integrate_numpy(x0: np.ndarray, e1: np.ndarray, e2: np.ndarray, p: dict, duration: float,
                     rtol: float) -> np.ndarray:
    """:func:`integrate` in numpy, vectorised over patients (the fallback without numba)."""
    y = np.array(x0, dtype=np.float64, copy=True)
    k = y.shape[1]
    t = np.zeros(k)
    h = np.full(k, 0.1)
    q_all = coefficients(e1, e2, p)
    fy = rhs_into(y, q_all, np.empty_like(y))
    active = np.arange(k)
    K_all = np.empty((_N_STAGES + 1, 6, k))
    for _ in range(_MAX_STEPS):
        if len(active) == 0:
            break
        full = len(active) == k
        ya = y if full else y[:, active]
        q = q_all if full else _subset(q_all, active)
        K = K_all if full else K_all[:, :, : len(active)]
        remaining = duration - t[active]
        ha = np.minimum(h[active], remaining)
        K[0] = fy if full else fy[:, active]
        for s in range(1, _N_STAGES):
            rhs_into(ya + ha * _combine(_A[s, :s], K[:s]), q, K[s])
        y_new = ya + ha * _combine(_B, K[:-1])
        rhs_into(y_new, q, K[-1])
        scale = rtol * np.maximum(np.abs(ya), np.abs(y_new)) + 1e-300
        err5 = np.sum((_combine(_E5, K) / scale) ** 2, axis=0)
        err3 = np.sum((_combine(_E3, K) / scale) ** 2, axis=0)
        denom = np.where(err5 + err3 > 0, err5 + 0.01 * err3, 1.0)
        err_norm = ha * err5 / np.sqrt(denom * 6)
        ok = (err_norm <= 1.0) & np.all(np.isfinite(y_new), axis=0) & np.all(y_new > 0, axis=0)
        with np.errstate(divide="ignore"):
            factor = np.where(err_norm == 0.0, 10.0, np.clip(0.9 * err_norm ** (-1 / 8), 0.2, 10.0))
        factor = np.where(ok, factor, np.minimum(factor, 0.5))
        acc = active[ok]
        y[:, acc] = y_new[:, ok]
        fy[:, acc] = K[-1][:, ok]
        last = ok & (ha >= remaining)
        t[acc] = np.where(last[ok], duration, t[acc] + ha[ok])
        h[active] = ha * factor
        active = active[~last]
    else:  # pragma: no cover - defensive
        raise DataError(f"HIV integration did not finish within {_MAX_STEPS} steps.")
    return y
