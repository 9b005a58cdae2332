"""Ingest: bronze events -> silver transitions / rejected_events, checked against hand-made answers.

The expected transitions below were worked out by hand from the fixture (forward fill, defaults,
reward windows ``(t_k, t_{k+1}]``, terminal vs truncated, the max_length cut); they are not output
of the code under test.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from collections import Counter

import pytest

from gpope.config import DatasetSettings, load_config
from gpope.errors import ConfigError
from gpope.shell.pipeline import ingest_frames as fr

pytestmark = pytest.mark.spark

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
NAN, INF = float("nan"), float("inf")


def d(days: float) -> dt.datetime:
    return T0 + dt.timedelta(days=days)


SETTINGS = DatasetSettings(
    variables=("hr", "bp"),
    defaults={"hr": 70.0},  # bp defaults to 0.0
    actions=("a", "b"),
    max_length=3,
    terminal_variable="death",
    missing_indicators=True,  # state = [hr, bp, missing_hr, missing_bp]
)

# p1: 3 steps, forward fill, terminal (death after the last treatment).
# p2: 5 treatments, cut at max_length 3: the last kept step is truncated, its next state is the
#     state at the first dropped treatment (d3); later rows are rejected as beyond max_length.
# p3: one step, nothing observed: defaults, reward 0, truncated.
GOOD_TREATMENTS = [
    ("p1", d(0), "a", 0.5), ("p1", d(2), "b", 0.25), ("p1", d(4), "a", 1.0),
    ("p2", d(0), "a", 0.5), ("p2", d(1), "a", 0.5), ("p2", d(2), "b", 0.5),
    ("p2", d(3), "b", 0.5), ("p2", d(4), "a", 0.5),
    ("p3", d(0), "b", 0.75),
]  # fmt: skip
GOOD_OBSERVATIONS = [
    ("p1", d(0), "hr", 80.0), ("p1", d(1), "bp", 120.0), ("p1", d(2), "hr", 90.0),
    ("p1", d(5), "bp", 130.0), ("p1", d(6), "death", 1.0),
    ("p2", d(-1), "bp", 100.0), ("p2", d(2.5), "hr", 60.0), ("p2", d(3), "hr", 65.0),
    ("p2", d(3.5), "bp", 1.0), ("p2", d(5), "death", 1.0),
]  # fmt: skip
GOOD_OUTCOMES = [
    ("p1", d(0), 1.0), ("p1", d(1), 2.0), ("p1", d(2), 3.0), ("p1", d(3), 5.0),
    ("p1", d(7), -1.0), ("p1", d(4), 0.5),
    ("p2", d(1), 1.0), ("p2", d(3), 2.0), ("p2", d(4), 4.0),
]  # fmt: skip

# (patient_id, traj_index, t, state, action, behavior_prob, reward, next_state, terminal, truncated)
EXPECTED = [
    ("p1", 0, 0, [80.0, 0.0, 0.0, 1.0], 0, 0.5, 5.0, [90.0, 120.0, 0.0, 0.0], False, False),  # 2+3
    ("p1", 0, 1, [90.0, 120.0, 0.0, 0.0], 1, 0.25, 5.5, [90.0, 120.0, 0.0, 0.0], False, False),
    ("p1", 0, 2, [90.0, 120.0, 0.0, 0.0], 0, 1.0, -1.0, [90.0, 130.0, 0.0, 0.0], True, False),
    ("p2", 1, 0, [70.0, 100.0, 1.0, 0.0], 0, 0.5, 1.0, [70.0, 100.0, 1.0, 0.0], False, False),
    ("p2", 1, 1, [70.0, 100.0, 1.0, 0.0], 0, 0.5, 0.0, [70.0, 100.0, 1.0, 0.0], False, False),
    ("p2", 1, 2, [70.0, 100.0, 1.0, 0.0], 1, 0.5, 2.0, [65.0, 100.0, 0.0, 0.0], False, True),
    ("p3", 2, 0, [70.0, 0.0, 1.0, 1.0], 1, 0.75, 0.0, [70.0, 0.0, 1.0, 1.0], False, True),
]
# Rows of the good fixture that are rejected by the rules (not bad rows): reason -> count.
EXPECTED_GOOD_REJECTS = {
    "treatments": {fr.BEYOND_MAX_LENGTH: 2},
    "observations": {fr.BEYOND_MAX_LENGTH: 2},  # bp at d3.5, death at d5 (after the cut)
    "outcomes": {fr.BEYOND_MAX_LENGTH: 1, fr.OUTCOME_BEFORE_FIRST_TREATMENT: 1},
}

# Hand-made bad rows, each with the one reason it must be rejected for.
BAD_TREATMENTS = [
    ((None, d(0), "a", 0.5), fr.NULL_PATIENT),
    (("", d(0), "a", 0.5), fr.EMPTY_PATIENT),
    (("p3", None, "a", 0.5), fr.NULL_TIME),
    (("p3", d(1), None, 0.5), fr.NULL_ACTION),
    (("p3", d(1), "a", NAN), fr.BAD_PROPENSITY),
    (("p3", d(1), "a", None), fr.BAD_PROPENSITY),
    (("p3", d(1), "a", 0.0), fr.PROPENSITY_RANGE),
    (("p3", d(1), "a", 1.5), fr.PROPENSITY_RANGE),
    (("p3", d(1), "z", 0.5), fr.UNKNOWN_ACTION),
    (("p1", d(2), "b", 0.25), fr.DUPLICATE_ROW),  # exact copy: the original is still used
    (("p4", d(0), "a", 0.5), fr.DUPLICATED_TIMESTAMP),  # both treatments of p4 at d0 rejected
    (("p4", d(0), "b", 0.5), fr.DUPLICATED_TIMESTAMP),
]
BAD_OBSERVATIONS = [
    (("p4", d(0), "hr", 1.0), fr.NO_TREATMENT),
    ((" ", d(0), "hr", 1.0), fr.EMPTY_PATIENT),
    (("p1", d(1), "bp", 120.0), fr.DUPLICATE_ROW),  # p4's only treatments were rejected
    (("p1", d(1), "temp", 37.0), fr.UNCONFIGURED_VARIABLE),
    (("p1", d(1), "hr", INF), fr.BAD_VALUE),
    (("p1", d(1), "hr", None), fr.BAD_VALUE),
    (("p1", d(1), None, 1.0), fr.NULL_VARIABLE),
    (("p3", d(3), "hr", 1.0), fr.DUPLICATED_TIMESTAMP),
    (("p3", d(3), "hr", 2.0), fr.DUPLICATED_TIMESTAMP),
    (("p3", d(-1), "death", 1.0), fr.TERMINAL_BEFORE_LAST_TREATMENT),
]
BAD_OUTCOMES = [
    (("p5", d(0), 1.0), fr.NO_TREATMENT),
    (("p1", d(3), 5.0), fr.DUPLICATE_ROW),
    (("p3", d(0), None), fr.BAD_REWARD),
    (("p3", d(1), -INF), fr.BAD_REWARD),
    ((None, d(1), 1.0), fr.NULL_PATIENT),
    (("", d(1), 1.0), fr.EMPTY_PATIENT),
]


GPOPE = [sys.executable, "-c", "import sys; from gpope.cli import main; sys.exit(main())"]


def _rows(df) -> list[tuple]:
    return [tuple(r) for r in df.orderBy("traj_index", "t").collect()]


def _frames(spark, obs, treat, out, settings=SETTINGS):
    from gpope.shell.schemas import OBSERVATIONS, OUTCOMES, TREATMENTS

    return fr.build_silver(
        spark.createDataFrame(obs, OBSERVATIONS),
        spark.createDataFrame(treat, TREATMENTS),
        spark.createDataFrame(out, OUTCOMES),
        settings,
    )


def test_settings_without_actions_or_variables_are_refused(spark):
    with pytest.raises(ConfigError, match="actions is empty"):
        _frames(spark, [], [], [], DatasetSettings(variables=("x",)))
    with pytest.raises(ConfigError, match="variables is empty"):
        _frames(spark, [], [], [], DatasetSettings(actions=("a",)))


def test_unknown_dataset_is_a_config_error_naming_the_fix():
    from gpope.shell.pipeline.ingest import resolve_dataset_settings

    with pytest.raises(ConfigError, match="--domain"):
        resolve_dataset_settings(load_config(), "nope")
    configured = load_config(datasets={"mine": {"variables": ["hr", "bp"], "defaults": {"hr": 70.0},
                                                "actions": ["a", "b"], "max_length": 3,
                                                "terminal_variable": "death",
                                                "missing_indicators": True},
                                       "sim": {"domain": "hiv"}})  # fmt: skip
    assert resolve_dataset_settings(configured, "mine") == SETTINGS
    sim = resolve_dataset_settings(configured, "sim")  # only a domain: the simulator's settings
    assert sim.domain == "hiv" and sim.variables[4] == "viral_load" and sim.actions[3] == "rti_pi"
    assert resolve_dataset_settings(load_config(), "nope", domain="chain").variables == ("stage",)


def test_cli_help_and_unknown_dataset_exit_nonzero_with_one_line(tmp_path):
    help_proc = subprocess.run(
        [*GPOPE, "ingest", "--help"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert help_proc.returncode == 0 and "--dataset" in help_proc.stdout
    proc = subprocess.run(
        [*GPOPE, "ingest", "--dataset", "nope",
         "--lake", str(tmp_path / "lake")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Dataset 'nope' is not configured" in lines[0]


# ---------------------------------------------------------------- through the lake (Delta tables)
def _bad(rows):
    return [row for row, _ in rows]


@pytest.fixture(scope="module")
def toy(spark, tmp_path_factory):
    """The good fixture plus every hand-made bad row, written as bronze and ingested twice."""
    from gpope.config import GpopeConfig, LakeSettings
    from gpope.shell import lake
    from gpope.shell.pipeline.ingest import run_ingest
    from gpope.shell.schemas import OBSERVATIONS, OUTCOMES, TREATMENTS

    root = tmp_path_factory.mktemp("lake")
    config = GpopeConfig(lake=LakeSettings(root=str(root)), datasets={"toy": SETTINGS})
    bronze = {
        "observations": (GOOD_OBSERVATIONS + _bad(BAD_OBSERVATIONS), OBSERVATIONS),
        "treatments": (GOOD_TREATMENTS + _bad(BAD_TREATMENTS), TREATMENTS),
        "outcomes": (GOOD_OUTCOMES + _bad(BAD_OUTCOMES), OUTCOMES),
    }
    for table, (rows, schema) in bronze.items():
        df = spark.createDataFrame(rows, schema)
        lake.write_table(df, config.lake, "bronze", "toy", table, mode="overwrite")

    def snapshot():
        silver = {
            t: lake.read_table(spark, config.lake, "silver", "toy", t)
            for t in ("transitions", "rejected_events")
        }
        return _rows(silver["transitions"]), sorted(tuple(r) for r in silver["rejected_events"].collect())

    first = run_ingest(spark, config, "toy")
    first_snapshot = snapshot()
    second = run_ingest(spark, config, "toy")
    return {
        "config": config,
        "reports": (first, second),
        "snapshots": (first_snapshot, snapshot()),
        "lake": lake.Lake.from_settings(spark, config.lake),
    }


def test_hand_fixture_gives_hand_computed_transitions_despite_bad_rows(toy):
    transitions, _ = toy["snapshots"][0]
    assert transitions == EXPECTED


def test_each_bad_row_is_rejected_with_its_reason_and_counts_balance(toy):
    report = toy["reports"][0]
    expected: dict[str, Counter] = {t: Counter(r) for t, r in EXPECTED_GOOD_REJECTS.items()}
    for table, rows in (
        ("treatments", BAD_TREATMENTS), ("observations", BAD_OBSERVATIONS), ("outcomes", BAD_OUTCOMES)
    ):  # fmt: skip
        expected[table].update(reason for _, reason in rows)
    assert report.rejected == {t: dict(c) for t, c in expected.items()}
    assert report.rows_in == {
        "observations": len(GOOD_OBSERVATIONS) + len(BAD_OBSERVATIONS),
        "treatments": len(GOOD_TREATMENTS) + len(BAD_TREATMENTS),
        "outcomes": len(GOOD_OUTCOMES) + len(BAD_OUTCOMES),
    }
    # used by hand: 7 kept treatments; observations of p1 (5) and p2 up to the cut (3);
    # outcomes of p1 after d0 (5) and of p2 up to the cut (2)
    assert report.rows_used == {"observations": 8, "treatments": 7, "outcomes": 7}
    for table in report.rows_in:
        assert report.rows_in[table] == report.rows_used[table] + report.rejected_total(table)
    assert report.balanced
    assert (report.n_trajectories, report.n_transitions, report.n_terminal) == (3, 7, 1)
    # p3 stops after one step (truncated), p2 is cut at max_length 3 (length-capped)
    assert (report.n_truncated, report.n_length_capped) == (1, 1)
    assert report.warnings == [] and "1 terminal, 1 truncated" in report.summary()


def test_an_undeclared_end_marker_is_refused_before_anything_is_written(toy, spark):
    # 'death' is observed only after p1's and p2's last treatments: with no terminal_variable
    # declared, the data are ambiguous (a real end, or a variable to ignore?) and ingest refuses
    # in one line naming both declarations that settle it
    import dataclasses

    from gpope.shell import lake
    from gpope.shell.pipeline.ingest import run_ingest
    from gpope.shell.pipeline.ingest_ends import undeclared_end_markers

    config = toy["config"]
    undeclared = dataclasses.replace(SETTINGS, terminal_variable=None)
    bronze = {t: lake.read_table(spark, config.lake, "bronze", "toy", t)
              for t in ("observations", "treatments")}
    # hr and bp are declared; the bad rows' unknown variable is seen before a last treatment
    assert undeclared_end_markers(bronze["observations"], bronze["treatments"], undeclared) == \
        {"death": 2}
    silver = lake.Lake.from_settings(spark, config.lake)
    before = silver.version(lake.TableRef("silver", "transitions", "toy"))
    with pytest.raises(ConfigError) as err:
        run_ingest(spark, config, "toy", settings=undeclared)
    message = str(err.value)
    assert "\n" not in message and "nothing written" in message and "'death'" in message
    assert "terminal_variable: death" in message and "no_terminal_events: true" in message
    assert silver.version(lake.TableRef("silver", "transitions", "toy")) == before
    # declared either way, or a simulated cohort: nothing to check (no Spark job)
    for settled in (SETTINGS, dataclasses.replace(undeclared, no_terminal_events=True),
                    dataclasses.replace(undeclared, domain="chain")):
        assert undeclared_end_markers(None, None, settled) == {}  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="Keep one of the two"):
        dataclasses.replace(SETTINGS, no_terminal_events=True)


def test_rejected_events_hold_the_raw_rows_as_json(toy):
    import json

    _, rejected = toy["snapshots"][0]
    got = Counter((table, reason, json.loads(row)["patient_id"]) for table, reason, row in rejected)
    want = Counter()
    for table, rows in (
        ("treatments", BAD_TREATMENTS), ("observations", BAD_OBSERVATIONS), ("outcomes", BAD_OUTCOMES)
    ):  # fmt: skip
        want.update((table, reason, row[0]) for row, reason in rows)
    want.update({
        ("treatments", fr.BEYOND_MAX_LENGTH, "p2"): 2,
        ("observations", fr.BEYOND_MAX_LENGTH, "p2"): 2,
        ("outcomes", fr.BEYOND_MAX_LENGTH, "p2"): 1,
        ("outcomes", fr.OUTCOME_BEFORE_FIRST_TREATMENT, "p1"): 1,
    })  # fmt: skip
    assert got == want
    nan_row = next(json.loads(r) for t, reason, r in rejected if reason == fr.BAD_PROPENSITY
                   and "NaN" in r)  # fmt: skip
    assert nan_row == {"patient_id": "p3", "time": "2024-01-02T00:00:00.000Z", "action": "a",
                       "propensity": "NaN"}  # fmt: skip


def test_rerun_replaces_the_silver_tables_identically(toy):
    first, second = toy["reports"]
    assert first == second
    assert toy["snapshots"][0] == toy["snapshots"][1]
    from gpope.shell.lake import TableRef

    for table in ("transitions", "rejected_events"):
        history = toy["lake"].history(TableRef("silver", table, "toy"))
        assert [h.version for h in history] == [0, 1]
        assert all(h.mode == "overwrite" for h in history)
    assert len(toy["snapshots"][1][0]) == len(EXPECTED)  # not doubled


# ------------------------------------------------- a simulated cohort with every kind of bad row
# inject_bad_rows (conftest) names its own reasons; each maps to the ingest reasons that cover it.
EHR_REASONS = {
    "observations": {
        "invalid_value": {fr.BAD_VALUE},
        "unknown_variable": {fr.UNCONFIGURED_VARIABLE},
        "duplicate_row": {fr.DUPLICATE_ROW},
        "no_treatments": {fr.NO_TREATMENT},
    },
    "treatments": {
        "unknown_action": {fr.UNKNOWN_ACTION},
        "invalid_propensity": {fr.BAD_PROPENSITY, fr.PROPENSITY_RANGE},
        "duplicate_row": {fr.DUPLICATE_ROW},
    },
    "outcomes": {
        "invalid_value": {fr.BAD_REWARD},
        "no_treatments": {fr.NO_TREATMENT},
        "unknown_patient": {fr.NO_TREATMENT},
    },
}


def test_injected_bad_rows_are_all_rejected_and_the_cohort_is_recovered(spark, lake_root,
                                                                         inject_bad_rows):
    import numpy as np
    from conftest import simulate_tables

    from gpope.config import GpopeConfig, LakeSettings
    from gpope.core.envs import ehr
    from gpope.shell import lake
    from gpope.shell.pipeline.ingest import run_ingest
    from gpope.shell.pipeline.simulate import dataset_settings_for_domain, tables_to_arrow
    from gpope.shell.schemas import TABLE_SCHEMAS

    episodes, clean = simulate_tables("chain", 6, seed=3)
    dirty, expected = inject_bad_rows(
        clean, np.random.default_rng(4), ehr.CHAIN_SPEC, per_reason=4
    )
    config = GpopeConfig(lake=LakeSettings(root=str(lake_root)))
    for table, arrow in tables_to_arrow(dirty).items():
        df = spark.createDataFrame(arrow.to_pandas(), schema=TABLE_SCHEMAS[table])
        lake.write_table(df, config.lake, "bronze", "dirty", table, mode="overwrite")
    report = run_ingest(spark, config, "dirty", domain="chain")

    for table, groups in EHR_REASONS.items():
        got: Counter = Counter()
        for ehr_reason, ours in groups.items():
            got[frozenset(ours)] += expected[table].get(ehr_reason, 0)
        ours_got: Counter = Counter()
        for reason, n in report.rejected[table].items():
            ours_got[next(frozenset(g) for g in groups.values() if reason in g)] += n
        assert ours_got == got, table
        assert report.rows_used[table] == len(clean[table]["patient_id"])
    assert report.balanced

    got_tr = lake.read_table(spark, config.lake, "silver", "dirty", "transitions")
    df = got_tr.orderBy("traj_index", "t").toPandas()
    np.testing.assert_array_equal(np.stack(df["state"]), episodes.state)
    np.testing.assert_array_equal(np.stack(df["next_state"]), episodes.next_state)
    np.testing.assert_array_equal(df["traj_index"], episodes.traj_index)
    np.testing.assert_array_equal(df["t"], episodes.t)
    np.testing.assert_array_equal(df["action"], episodes.action)
    np.testing.assert_array_equal(df["reward"], episodes.reward)
    np.testing.assert_array_equal(df["behavior_prob"], episodes.behavior_prob)
    np.testing.assert_array_equal(df["terminal"], episodes.terminal)
    np.testing.assert_array_equal(df["truncated"], episodes.truncated)
    assert dataset_settings_for_domain("chain").terminal_variable == "absorbed"


def test_rewards_that_overflow_when_summed_quarantine_the_patient(spark):
    """Issue 13.3: 1e308 + 1.7e308 in one step is inf after aggregation: quarantined, not silver."""
    import math

    treat = [("p1", d(0), "a", 0.5), ("p1", d(2), "b", 0.5), ("p3", d(0), "b", 0.75)]
    obs = [("p1", d(0), "hr", 80.0), ("p3", d(0), "hr", 70.0)]
    out = [("p1", d(1), 1e308), ("p1", d(1.5), 1.7e308), ("p1", d(3), 1.0), ("p3", d(1), 2.0)]
    frames = _frames(spark, obs, treat, out)
    try:
        transitions = frames.transitions.collect()
        rejected = Counter((r["table"], r["reason"]) for r in frames.rejected_events.collect())
        counts = Counter({(r["table"], r["reason"]): r["count"] for r in frames.outcome_counts.collect()})
    finally:
        frames.release()
    assert {r["patient_id"] for r in transitions} == {"p3"}
    assert all(math.isfinite(r["reward"]) for r in transitions)
    assert rejected == {("treatments", fr.REWARD_OVERFLOW): 2, ("observations", fr.REWARD_OVERFLOW): 1,
                        ("outcomes", fr.REWARD_OVERFLOW): 3}
    for table, n_in in (("treatments", 3), ("observations", 2), ("outcomes", 4)):  # rows balance
        assert sum(n for (t, _), n in counts.items() if t == table) == n_in


def test_bronze_contract_missing_or_wrong_type_is_one_line_and_bad_text_is_quarantined(
    spark, lake_root
):
    """Issue 13.5: a missing/wrongly typed column is one SchemaError line; text is parsed row by
    row and an unparsable value is quarantined with its raw row (no silent cast, no abort)."""
    import json

    from pyspark.sql.types import StringType, StructField, StructType, TimestampType

    from gpope.config import GpopeConfig, LakeSettings
    from gpope.errors import SchemaError
    from gpope.shell import lake
    from gpope.shell.pipeline.ingest import run_ingest
    from gpope.shell.schemas import OBSERVATIONS, TREATMENTS

    config = GpopeConfig(lake=LakeSettings(root=str(lake_root)),
                         datasets={n: SETTINGS for n in ("c", "c_missing", "c_type")})
    text = StructType([StructField("patient_id", StringType()), StructField("time", TimestampType()),
                       StructField("reward", StringType())])
    outcomes = spark.createDataFrame(
        [("p1", d(1), "2.5"), ("p1", d(3), "abc"), ("p3", d(1), "1e1")], text
    )

    def deliver(dataset, outcomes_df):
        frames = {
            "observations": spark.createDataFrame([("p1", d(0), "hr", 80.0)], OBSERVATIONS),
            "treatments": spark.createDataFrame([("p1", d(0), "a", 0.5), ("p3", d(0), "b", 0.5)],
                                                TREATMENTS),
            "outcomes": outcomes_df,
        }
        for table, df in frames.items():
            lake.write_table(df, config.lake, "bronze", dataset, table, mode="overwrite",
                             schema=df.schema if table == "outcomes" else None)

    deliver("c", outcomes)
    report = run_ingest(spark, config, "c")
    assert report.balanced and report.rejected["outcomes"] == {"unparsable reward": 1}
    assert report.rows_used["outcomes"] == 2
    rejected = lake.read_table(spark, config.lake, "silver", "c", "rejected_events").collect()
    assert [json.loads(r["row"])["reward"] for r in rejected] == ["abc"]  # the raw text
    rewards = {r["patient_id"]: r["reward"] for r in
               lake.read_table(spark, config.lake, "silver", "c", "transitions").collect()}
    assert rewards == {"p1": 2.5, "p3": 10.0}

    for dataset, bad in (("c_missing", outcomes.drop("reward")),
                         ("c_type", outcomes.withColumn("reward", outcomes.time))):
        deliver(dataset, bad)
        with pytest.raises(SchemaError) as err:
            run_ingest(spark, config, dataset)
        message = str(err.value)
        assert "\n" not in message and f"bronze/{dataset}/outcomes" in message
        assert "'reward'" in message and "expected double" in message


def test_episode_ends_are_reported_and_a_missing_terminal_convention_warns_in_one_line():
    from gpope.shell.pipeline.ingest import IngestReport

    base = {"dataset": "d", "rows_in": {"treatments": 5}, "rows_used": {"treatments": 5},
            "n_trajectories": 3, "n_transitions": 5, "max_length": 4}
    undeclared = IngestReport(**base, n_truncated=2, n_length_capped=1)
    (line,) = undeclared.warnings
    # one line: what was seen, what was assumed, what it costs if wrong, how to declare it
    assert "2 of 3 episodes stop before max_length 4 and no terminal_variable is declared" in line
    assert "ASSUMED each was truncated" in line and "biased" in line and "\n" not in line
    assert "'terminal_variable'" in line and "'no_terminal_events: true'" in line
    # the noise-free counts (the warning's included) sit under the one-line operator heading,
    # and --json keeps them under operator_only; nothing is above it, not even m (released only
    # as the noisy count m~ by gpope evaluate)
    from gpope.shell.operator import HEADING

    public, heading, warning, count, *_ = undeclared.summary().splitlines()
    assert public == "ingest d: silver transitions written" and heading == HEADING
    assert count.startswith("  3 trajectories (the exact m; released only as the noisy count m~)")
    assert "operator only, not private" in heading and warning == f"  {line}"
    shown = undeclared.to_dict()
    assert set(shown) == {"dataset", "terminal_variable", "no_terminal_events",
                          "max_length", "operator_only"}
    assert shown["operator_only"]["diagnostic.private"] is True
    assert shown["operator_only"]["rows_in"] == {"treatments": 5}
    assert shown["operator_only"]["n_trajectories"] == 3
    assert "0 terminal, 2 truncated (record stops, bootstrapped), 1 at the length cap 4; no " \
           "terminal_variable declared" in undeclared.summary()
    assert undeclared.to_dict()["operator_only"]["warnings"] == [line]
    # every episode reached the cap: nothing was assumed, nothing to warn about
    capped = IngestReport(**base, n_length_capped=3)
    assert capped.warnings == [] and "assumed" not in capped.summary()
    # the user declared that episodes never end: the assumption is theirs, no warning
    confirmed = IngestReport(**base, n_truncated=2, n_length_capped=1, no_terminal_events=True)
    assert confirmed.warnings == [] and "no_terminal_events declared" in confirmed.summary()
    assert confirmed.to_dict()["no_terminal_events"] is True
    unseen = IngestReport(**base, terminal_variable="death", n_truncated=3)
    assert "'death' is declared but never observed" in unseen.warnings[0]
    ended = IngestReport(**base, terminal_variable="death", n_terminal=1, n_truncated=2)
    assert ended.warnings == [] and ended.to_dict()["operator_only"]["n_truncated"] == 2


def test_a_state_variable_unknown_at_most_first_decisions_warns_in_one_line(toy, spark):
    # hr/bp recorded after the first decision look like charting after the order; counted per
    # variable whose absence the dataset does not declare (no default, no missing indicators)
    import dataclasses

    from gpope.shell import lake
    from gpope.shell.pipeline.ingest import IngestReport
    from gpope.shell.pipeline.ingest_first_state import unknown_at_first_decision

    config = toy["config"]
    bronze = {t: lake.read_table(spark, config.lake, "bronze", "toy", t)
              for t in ("observations", "treatments")}
    bare = dataclasses.replace(SETTINGS, defaults={}, missing_indicators=False)
    # timed treatments: p1, p2, p3, p4 and the empty id; hr at or before the first one: p1 (d0)
    # and p4 (d0); bp: p2 (d-1) only
    assert unknown_at_first_decision(bronze["observations"], bronze["treatments"], bare) == \
        (5, {"hr": 3, "bp": 4})
    # declared absence (a default for hr, or indicators): not counted, no Spark job
    assert unknown_at_first_decision(bronze["observations"], bronze["treatments"],
                                     dataclasses.replace(bare, defaults={"hr": 70.0})) == \
        (5, {"bp": 4})
    assert unknown_at_first_decision(None, None, SETTINGS) == (0, {})  # type: ignore[arg-type]
    assert toy["reports"][0].warnings == []
    report = IngestReport(dataset="d", rows_in={}, rows_used={}, n_trajectories=5,
                          n_terminal=5, unknown_at_first={"hr": 3, "bp": 2}, first_checked=5)
    (line,) = report.warnings
    assert line.startswith("WARNING: 3 of 5 patients have no 'hr' observed at or before their "
                           "first treatment") and "\n" not in line
    assert "one step late" in line and "defaults: {hr: VALUE}" in line
    assert report.to_dict()["operator_only"]["unknown_at_first"] == {"hr": 3, "bp": 2}
