"""Privacy accounting of GPOPE: epsilon for a noise multiplier and sigma for a target epsilon.

Accountants (``accountant=``), registered in :mod:`.registry` (one interface; the CLI choices,
the settings' constraint and ``"auto"`` read it):

- ``"rdp"``: Renyi DP via dp-accounting (Mironov 2017; subsampling without replacement: Wang,
  Balle, Kasiviswanathan 2019, Thm. 27; Poisson: Mironov, Talwar, Zhang 2019). Rigorous.
- ``"pld"``: privacy loss distributions via dp-accounting (Koskela et al. 2020; Doroshenko et al.
  2022 connect-the-dots), Poisson sampling only, with an adaptive grid (:mod:`.pld`). Rigorous.
- ``"paper"``: the paper's Lemma 1 used literally (:mod:`.paper`). NOT a valid bound; for
  reproducing the paper only.
- ``"auto"``: the tightest rigorous accountant for the sampling (:func:`resolve_accountant`).

Sampling (``sampling=``): ``"uniform"`` (one trajectory per step; replace-one adjacency,
sensitivity ``2h``) or ``"poisson"`` (rate ``batch_rate``; add/remove adjacency, sensitivity ``h``).
See reference/ACCOUNTING.md.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Public name -> submodule, loaded on first use (PEP 562): importing one submodule (the ledger's
#: pure budget logic for ``gpope budget show``) does not load dp-accounting and scipy.
_EXPORTS: dict[str, str] = {name: module for module, names in {
    "_common": ("gpope_dp_event",),
    "api": ("RDP_ORDERS", "SIGMA_MAX", "SIGMA_MIN", "Calibration", "calibrate",
            "calibrate_sigma", "epsilon_spent"),
    "pld": ("DEFAULT_PLD_GRID", "PLDGrid", "pld_cost", "pld_epsilon", "pld_epsilon_adaptive"),
    "registry": ("AccountantInfo", "PrivacyAccountant", "accountant_choices", "accountant_info",
                 "not_a_valid_bound", "register", "resolve_accountant"),
}.items() for name in names}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
