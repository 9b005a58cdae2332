"""Shared vocabulary of the accountants: names, input checks, the dp-accounting event of a run.

Mechanism (reference/ACCOUNTING.md): each of the ``N`` steps selects trajectories, clips each
selected trajectory's gradient to L2 norm ``<= h``, sums them and adds ``N(0, (sigma h)^2 I)``.
``sigma`` is the noise multiplier relative to the clip bound ``h`` (Algorithm 1 of the paper).

| sampling  | adjacency   | sensitivity | event of one step                                                   |
|-----------|-------------|-------------|---------------------------------------------------------------------|
| uniform   | replace-one | ``2h``      | ``SampledWithoutReplacementDpEvent(m, 1, GaussianDpEvent(sigma/2))`` |
| poisson   | add/remove  | ``h``       | ``PoissonSampledDpEvent(q, GaussianDpEvent(sigma))``                 |

The ``sigma / 2`` of the uniform row is deliberate: under ``REPLACE_ONE`` dp-accounting 0.6 reads
``GaussianDpEvent.noise_multiplier`` as noise std / sensitivity (google/differential-privacy issue
#378), and the sensitivity of a replaced clipped gradient is ``2h``.
"""

from __future__ import annotations

from typing import Literal

import dp_accounting

from gpope.core.accounting.registry import SAMPLINGS
from gpope.core.validation import check_choice, check_int, check_number, check_probability
from gpope.errors import ConfigError

#: An accountant name: "auto" or a registered one (:mod:`.registry`).
Accountant = str
Sampling = Literal["uniform", "poisson"]


def check_common(owner: str, *, m: object, iterations: object, delta: object, sampling: object,
                 batch_rate: object) -> tuple[int, int, float, str, float | None]:
    """Validate the inputs every accountant shares; returns them normalised.

    ``batch_rate`` must be ``None`` for uniform sampling (q = 1/m is implied) and a probability
    in (0, 1] for Poisson sampling.

    Raises:
        ConfigError: in the house message form.
    """
    m_ = check_int(owner, "m", m, ge=1)
    n_ = check_int(owner, "iterations", iterations, ge=1)
    d_ = check_number(owner, "delta", delta, gt=0.0, lt=1.0)
    s_ = check_choice(owner, "sampling", sampling, SAMPLINGS)
    if s_ == "uniform":
        if batch_rate is not None:
            raise ConfigError(
                f"The 'batch_rate' parameter of {owner} must be None for sampling='uniform' "
                f"(exactly one trajectory per step, q = 1/m is implied). Got {batch_rate!r} "
                "instead. Drop it, or use sampling='poisson'."
            )
        q: float | None = None
    else:
        if batch_rate is None:
            raise ConfigError(
                f"The 'batch_rate' parameter of {owner} must be a probability in (0, 1] for "
                "sampling='poisson'. Got None instead. Pass the public Poisson rate q "
                "(e.g. 1/m)."
            )
        q = check_probability(owner, "batch_rate", batch_rate)
    return m_, n_, d_, s_, q  # type: ignore[return-value]


def neighboring_relation(sampling: str) -> dp_accounting.NeighboringRelation:
    """The adjacency that matches ``sampling``: replace-one (uniform) or add/remove (Poisson)."""
    if sampling == "uniform":
        return dp_accounting.NeighboringRelation.REPLACE_ONE
    return dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE


def step_event(
    *, m: int, sigma: float, sampling: str, batch_rate: float | None
) -> dp_accounting.DpEvent:
    """The dp-accounting event of one GPOPE step (inputs already validated)."""
    if sampling == "uniform":
        # Replace-one: sensitivity 2h, so noise std / sensitivity = sigma / 2 (issue #378).
        return dp_accounting.SampledWithoutReplacementDpEvent(
            source_dataset_size=m, sample_size=1,
            event=dp_accounting.GaussianDpEvent(noise_multiplier=sigma / 2.0))
    return dp_accounting.PoissonSampledDpEvent(
        sampling_probability=batch_rate,
        event=dp_accounting.GaussianDpEvent(noise_multiplier=sigma))


def gpope_dp_event(*, m: int, iterations: int, sigma: float, sampling: Sampling = "uniform",
                   batch_rate: float | None = None) -> dp_accounting.DpEvent:
    """``SelfComposedDpEvent(step, iterations)`` of one GPOPE run (what the ledger stores), the
    step event of the module table; read it under :func:`neighboring_relation`.

    Raises:
        ConfigError: invalid inputs.
    """
    m_, n_, _, s_, q = check_common(
        "gpope_dp_event", m=m, iterations=iterations, delta=0.5, sampling=sampling,
        batch_rate=batch_rate)
    sigma_ = check_number("gpope_dp_event", "sigma", sigma, gt=0.0)
    step = step_event(m=m_, sigma=sigma_, sampling=s_, batch_rate=q)  # type: ignore[arg-type]
    return dp_accounting.SelfComposedDpEvent(event=step, count=n_)
