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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpope.core.accounting._common import (
        ACCOUNTANTS,
        SAMPLINGS,
        SUPPORTED,
        Accountant,
        Sampling,
        gpope_dp_event,
        neighboring_relation,
    )
    from gpope.core.accounting.api import (
        RDP_ORDERS,
        SIGMA_MAX,
        SIGMA_MIN,
        Calibration,
        PrivacySpend,
        calibrate,
        calibrate_sigma,
        epsilon_spent,
        privacy_spend,
    )
    from gpope.core.accounting.paper import paper_epsilon, paper_sigma
    from gpope.core.accounting.pld import (
        DEFAULT_PLD_GRID,
        PLDCost,
        PLDEstimate,
        PLDGrid,
        gdp_sigma_guess,
        pld_cost,
        pld_epsilon,
        pld_epsilon_adaptive,
    )
    from gpope.core.accounting.registry import (
        AccountantInfo,
        PrivacyAccountant,
        accountant_choices,
        accountant_info,
        not_a_valid_bound,
        register,
        resolve_accountant,
    )

#: Public name -> submodule. Loaded on first use (PEP 562), so importing one submodule (e.g. the
#: ledger's pure budget logic for ``gpope budget show``) does not import dp-accounting's PLD and
#: scipy.
_EXPORTS: dict[str, str] = {
    "ACCOUNTANTS": "_common",
    "Accountant": "_common",
    "AccountantInfo": "registry",
    "PrivacyAccountant": "registry",
    "accountant_choices": "registry",
    "accountant_info": "registry",
    "not_a_valid_bound": "registry",
    "register": "registry",
    "Calibration": "api",
    "DEFAULT_PLD_GRID": "pld",
    "PLDCost": "pld",
    "PLDEstimate": "pld",
    "PLDGrid": "pld",
    "PrivacySpend": "api",
    "RDP_ORDERS": "api",
    "SAMPLINGS": "_common",
    "SIGMA_MAX": "api",
    "SIGMA_MIN": "api",
    "SUPPORTED": "_common",
    "Sampling": "_common",
    "calibrate": "api",
    "calibrate_sigma": "api",
    "epsilon_spent": "api",
    "gdp_sigma_guess": "pld",
    "gpope_dp_event": "_common",
    "neighboring_relation": "_common",
    "paper_epsilon": "paper",
    "paper_sigma": "paper",
    "pld_cost": "pld",
    "pld_epsilon": "pld",
    "pld_epsilon_adaptive": "pld",
    "privacy_spend": "api",
    "resolve_accountant": "registry",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = [
    "ACCOUNTANTS",
    "DEFAULT_PLD_GRID",
    "RDP_ORDERS",
    "SAMPLINGS",
    "SIGMA_MAX",
    "SIGMA_MIN",
    "SUPPORTED",
    "Accountant",
    "AccountantInfo",
    "Calibration",
    "PLDCost",
    "PLDEstimate",
    "PLDGrid",
    "PrivacyAccountant",
    "PrivacySpend",
    "Sampling",
    "accountant_choices",
    "accountant_info",
    "calibrate",
    "calibrate_sigma",
    "epsilon_spent",
    "gdp_sigma_guess",
    "gpope_dp_event",
    "neighboring_relation",
    "not_a_valid_bound",
    "paper_epsilon",
    "paper_sigma",
    "pld_cost",
    "pld_epsilon",
    "pld_epsilon_adaptive",
    "privacy_spend",
    "register",
    "resolve_accountant",
]
