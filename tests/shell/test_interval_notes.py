"""The one-line note under unbounded intervals (gpope.shell.pipeline.interval_notes; no Spark)."""

from __future__ import annotations

from gpope.shell.pipeline.interval_notes import (
    IDENTIFICATION_NOTE,
    PER_STATE_NOTE,
    unbounded_note,
)

INF = float("inf")


def test_a_release_identified_per_state_says_which_values_are_not():
    whole = unbounded_note({"lower": [-INF, -INF], "upper": [INF, INF], "unidentified": True,
                            "separation": 0.7})
    assert whole == IDENTIFICATION_NOTE.format(separation="0.7")
    part = unbounded_note({"lower": [-INF, 0.1], "upper": [INF, 0.3], "unidentified": True,
                           "separation": 0.7}, estimator="untuned")
    assert part == PER_STATE_NOTE.format(separation="0.7").replace(
        "more patients, a larger epsilon or a larger --statistics-share (gpope runs) give a finite "
        "one", "more patients or a larger epsilon give a finite one")
    assert "\n" not in part and "--statistics-share" not in part
