"""Baseline policy-evaluation estimators (BASELINES.md): LSTD, WIS-LSTD, DP-LSW and DP-LSL.

Non-private: :func:`lstd` (LSTD(lambda), on/off-policy), :func:`wis_lstd` (WIS-LSTD(lambda)).
Private (finite state sets only): :func:`dp_lsw`, :func:`dp_lsl` (Balle et al., ICML 2016),
built on :func:`first_visit_statistics` and the smooth-sensitivity bounds of
:mod:`gpope.core.baselines.smooth`.
"""

from __future__ import annotations

from gpope.core.baselines.dp_ls import DPLSResult, dp_lsl, dp_lsw
from gpope.core.baselines.first_visit import first_visit_statistics
from gpope.core.baselines.lstd import LSTDResult, lstd, lstd_from_transitions
from gpope.core.baselines.wis_lstd import wis_lstd, wis_lstd_from_transitions

__all__ = ["DPLSResult", "LSTDResult", "dp_lsl", "dp_lsw", "first_visit_statistics", "lstd",
           "lstd_from_transitions", "wis_lstd", "wis_lstd_from_transitions"]
