"""The one-line notes under released intervals that are unbounded, and how a span is printed.

Shared by the evaluate report, the demo and MLflow's ``gpope.interval_note`` tag.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["IDENTIFICATION_NOTE", "NO_SUPPORT_NOTE", "PER_STATE_NOTE", "UNBOUNDED_NOTE",
           "format_span", "unbounded_note"]

#: Printed under intervals that are unbounded because a feature they depend on is below the
#: support threshold (gpope.core.intervals.depends_on).
UNBOUNDED_NOTE = ("unbounded: the noisy statistics leave a feature this value depends on below the "
                  "noise (no finite interval is valid); more patients, a larger epsilon or a larger "
                  "--statistics-share (gpope runs) give a finite one")

#: Printed under intervals that are unbounded because the identification test did not reject a
#: singular summed A (gpope.core.intervals.separated_from_singular; evaluation.ssp_identification).
IDENTIFICATION_NOTE = ("unbounded: the noisy statistics cannot exclude a singular A (the values may "
                       "not be identified; separation {separation} of the identification test's "
                       "threshold, > 1 needed), and there no finite interval is valid; more "
                       "patients, a larger epsilon or a larger --statistics-share (gpope runs) "
                       "give a finite one")

#: Printed when the identification test did not reject for the whole A but some values are
#: identified without the least-visited states (tabular features, gpope.core.untuned.weak).
PER_STATE_NOTE = ("unbounded: a state this value depends on is visited too little to be "
                  "identified (separation {separation} of the whole A's test, > 1 needed); the "
                  "finite intervals are identified without those states and widened by what they "
                  "can move them; more patients, a larger epsilon or a larger --statistics-share "
                  "(gpope runs) give a finite one")

#: Printed under intervals that are unbounded because the noisy statistics support no feature at
#: all, so there was nothing to test for identification.
NO_SUPPORT_NOTE = ("unbounded: the noisy statistics leave every feature below the noise, so no "
                   "value is identified and no finite interval is valid; more patients, a larger "
                   "epsilon or a larger --statistics-share (gpope runs) give a finite one")

#: The notes' advice for a gpope run, and for every other estimator (whose intervals do not rest
#: on the --statistics-share release, so that flag would not help them).
_GPOPE_REMEDY = ("more patients, a larger epsilon or a larger --statistics-share (gpope runs) "
                 "give a finite one")
_REMEDY = "more patients or a larger epsilon give a finite one"


def unbounded_note(intervals: Mapping[str, Any] | None, *, estimator: str = "gpope"
                   ) -> str | None:
    """The one line saying why some of ``intervals`` (an ``Interval.to_dict()``) are unbounded,
    or None when every interval is finite: :data:`IDENTIFICATION_NOTE` when the identification
    test did not reject (its ``unidentified``; :data:`PER_STATE_NOTE` when some values are
    finite all the same, identified per state), else :data:`UNBOUNDED_NOTE`; its advice names
    only what helps the run's ``estimator``
    (:attr:`gpope.core.estimators.Estimator.statistics_share_helps`)."""
    from gpope.core.estimators import get

    if not intervals or all(math.isfinite(v) for v in [*intervals["lower"], *intervals["upper"]]):
        return None
    note = UNBOUNDED_NOTE
    if intervals.get("unidentified"):
        sep = intervals.get("separation")
        # unidentified with an infinite separation: no feature was supported to test at all
        finite = any(math.isfinite(v) for v in intervals["upper"])
        note = (NO_SUPPORT_NOTE if sep is not None and math.isinf(sep) else
                (PER_STATE_NOTE if finite else IDENTIFICATION_NOTE).format(
                    separation="?" if sep is None else f"{sep:.2g}"))
    return (note if get(estimator).statistics_share_helps
            else note.replace(_GPOPE_REMEDY, _REMEDY))


def format_span(lower: float, upper: float) -> str:
    """``[lower, upper]`` (an infinite end printed as such), or ``unbounded`` when both are."""
    if not (math.isfinite(lower) or math.isfinite(upper)):
        return "unbounded"
    return f"[{lower:.4g}, {upper:.4g}]"
