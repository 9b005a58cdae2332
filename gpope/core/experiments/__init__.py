"""Paper-reproduction harness: pure numpy trials of GPOPE and the baselines on simulated data.

Per domain a settings dataclass (with a ``quick()`` preset), ``tune_<domain>`` (step size and clip
chosen on PUBLIC simulated data, a separate seed) and ``run_<domain>`` (one record per trial).
The shell (:mod:`gpope.shell.experiments`) writes CSV/JSON/figures and logs to MLflow.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from gpope.core.experiments.chain import ChainProblem, ChainSettings, run_chain, tune_chain
from gpope.core.experiments.common import (
    TuningTable,
    block_sizes,
    run_gpope_method,
    seed_seq,
    summarize,
)
from gpope.core.experiments.continuous import (
    HIVSettings,
    MountainCarSettings,
    run_continuous,
    tune_continuous,
)
from gpope.core.experiments.methods import Hyper, paper_method, product_method, rdp_method


@dataclass(frozen=True)
class Domain:
    """Entry points of one experiment domain."""

    settings: type
    tune: Callable[..., TuningTable]
    run: Callable[..., list[dict[str, Any]]]


#: Registered experiment domains.
DOMAINS: dict[str, Domain] = {
    "chain": Domain(ChainSettings, tune_chain, run_chain),
    "mountaincar": Domain(MountainCarSettings, partial(tune_continuous, "mountaincar"),
                          partial(run_continuous, "mountaincar")),
    "hiv": Domain(HIVSettings, partial(tune_continuous, "hiv"), partial(run_continuous, "hiv")),
}

__all__ = ["DOMAINS", "ChainProblem", "ChainSettings", "Domain", "HIVSettings", "Hyper",
           "MountainCarSettings", "TuningTable", "block_sizes", "paper_method", "product_method",
           "rdp_method", "run_chain", "run_gpope_method", "seed_seq", "summarize"]
