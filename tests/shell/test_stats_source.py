"""Which statistics count as stale (:class:`gpope.shell.pipeline.stats_source.StatsSource`):
the versions' truth table, without Spark; the refusal and the recorded release run on real
tables in tests/shell/test_evaluate_privacy.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpope.shell.pipeline.jobargs import load_spec
from gpope.shell.pipeline.stats_source import StatsSource

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("built_from", "current", "ingested", "stale"), [
    (3, 3, True, False),      # computed from the silver data readers see now
    (2, 3, True, True),       # a later ingest replaced the transitions
    (4, 0, True, True),       # the transitions table was re-created: not the data they came from
    (None, 3, True, True),    # no recorded source, and gpope ingest wrote the dataset
    (None, 3, False, False),  # no recorded source and no ingest: silver written by other tools
    (2, None, True, False),   # no transitions table any more: nothing newer to compare with
])
def test_statistics_are_stale_exactly_when_their_source_is_not_the_current_silver(
        built_from, current, ingested, stale):
    assert StatsSource(built_from=built_from, current=current, ingested=ingested).stale is stale


def test_the_description_names_both_versions():
    spec = load_spec(REPO / "conf" / "specs" / "chain.yaml")
    text = StatsSource(built_from=1, current=2, ingested=True).describe("d", spec)
    assert "version 1" in text and "version 2" in text and "'d'" in text
    assert "record no silver version" in StatsSource(None, 2, True).describe("d", spec)
