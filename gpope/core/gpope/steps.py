"""Step-size schedules of the GPOPE solver (public: step sizes are tuned on public data)."""

from __future__ import annotations

from typing import Literal

import numpy as np

from gpope.core.validation import check_choice, check_int, check_number

__all__ = ["STEP_SCHEDULES", "step_sizes"]

StepSchedule = Literal["constant", "inverse"]
STEP_SCHEDULES: tuple[str, ...] = ("constant", "inverse")


def step_sizes(iterations: int, step_size: float, schedule: StepSchedule = "constant",
               offset: float = 1.0) -> np.ndarray:
    """(N,) step sizes beta_1..beta_N: "constant" (beta_i = eta) or "inverse"
    (beta_i = eta / (i + offset), i from 1, offset >= 0)."""
    n = check_int("step_sizes", "iterations", iterations, ge=1)
    eta = check_number("step_sizes", "step_size", step_size, gt=0.0)
    check_choice("step_sizes", "schedule", schedule, STEP_SCHEDULES)
    i0 = check_number("step_sizes", "offset", offset, ge=0.0)
    if schedule == "constant":
        return np.full(n, eta)
    return eta / (np.arange(1, n + 1, dtype=np.float64) + i0)
