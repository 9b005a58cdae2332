"""Ingest's single-pass reference for ``pipeline_scale.py``: the same rules in one DuckDB process.

:func:`ingest_duckdb` reads a dataset's bronze Delta tables (deltalake's Arrow datasets, no
Spark) and computes what ``gpope ingest`` computes, rule for rule as
:mod:`gpope.shell.pipeline.ingest_frames` states them: per-row validation with the first
reason, duplicates and conflicting timestamps, the reward-overflow quarantine, ``max_length``
cuts, no-treatment / beyond-cut / outcome-before-first-treatment / terminal-before-last-treatment
rejections, the forward-filled states, rewards summed in sorted order of the values, next
states, terminal/truncated flags and ``traj_index`` as the rank of ``patient_id``. It writes the
transitions (sorted by ``traj_index, t``) and the rejected rows to Parquet and counts rows per
``(table, reason)``.

Differences from the stage, by design: bronze columns must already have the contract's types
(the stage also parses string columns row by row), the rejected ``row`` JSON is DuckDB's
formatting, and the output is plain Parquet (no Delta commit, no manifest). ``check_against``
compares the result with the silver tables the stage wrote (used to validate this reference).

DuckDB runs with 2 threads (the benchmark's ``local[2]``) and a 4 GB memory limit (the Spark
driver's), spilling to ``out``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["check_against", "ingest_duckdb"]

#: bronze rows per bucket of patients in the event-stream pass (about 1 GB of window input)
ROWS_PER_BUCKET = 15_000_000
NONFINITE = "({x} IS NULL OR isnan({x}) OR isinf({x}))"


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _in(values: Any) -> str:
    return "(" + ", ".join(_lit(v) for v in values) + ")"


def _first_reason(rules: list[tuple[str, str]]) -> str:
    return "CASE " + " ".join(f"WHEN {c} THEN {_lit(r)}" for c, r in rules) + " END"


def _add(cond: str, reason: str) -> str:
    return f"coalesce(_reason, CASE WHEN {cond} THEN {_lit(reason)} END)"


def _duplicates(con: Any, src: str, dst: str, columns: tuple[str, ...],
                conflict: tuple[str, ...] | None) -> None:
    from gpope.shell.pipeline.ingest_frames import DUPLICATE_ROW, DUPLICATED_TIMESTAMP

    order = ", ".join(f"{c} ASC NULLS FIRST" for c in ("_bad", *columns))
    w = f"(PARTITION BY patient_id ORDER BY {order})"
    same = " AND ".join(
        [f"lag(_bad) OVER {w} = 0"] + [f"lag({c}) OVER {w} IS NOT DISTINCT FROM {c}" for c in columns]
    )
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE {dst} AS
        SELECT * EXCLUDE (_reason, _bad), {_add(f"coalesce({same}, false)", DUPLICATE_ROW)} AS _reason
        FROM (SELECT *, (_reason IS NOT NULL)::INT AS _bad FROM {src})""")
    if conflict is not None:
        peers = ", ".join(conflict)
        con.execute(f"""
            CREATE OR REPLACE TEMP TABLE {dst} AS
            SELECT * EXCLUDE (_reason, _bad),
                   {_add(f"count(*) OVER (PARTITION BY patient_id, _bad, {peers}) > 1",
                         DUPLICATED_TIMESTAMP)} AS _reason
            FROM (SELECT *, (_reason IS NOT NULL)::INT AS _bad FROM {dst})""")


def _stream(con: Any, parts: list[str], settings: Any, path: str) -> None:
    """Forward-filled states, rewards, next states and flags of the patients in ``parts`` (one
    event stream), written sorted by ``(traj_index, t)`` to the Parquet file ``path``."""
    variables = list(settings.variables)
    upto = ("(PARTITION BY patient_id ORDER BY _end, time ASC NULLS FIRST, _ord "
            "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)")
    seen = [f"last_value(CASE WHEN variable = {_lit(v)} THEN value END IGNORE NULLS) OVER {upto}"
            for v in variables]
    entries = [f"coalesce({s}, {float(settings.defaults.get(v, 0.0))!r}::DOUBLE)"
               for v, s in zip(variables, seen, strict=True)]
    if settings.missing_indicators:
        entries += [f"CASE WHEN {s} IS NULL THEN 1.0::DOUBLE ELSE 0.0::DOUBLE END" for s in seen]
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE stepped AS
        SELECT patient_id, _ord, k, reward, _action, _prob, [{', '.join(entries)}] AS state,
               sum((_ord = 1)::BIGINT) OVER {upto} - 1 AS _step,
               coalesce(bool_or(_terminal) OVER (PARTITION BY patient_id), false) AS _ended
        FROM ({' UNION ALL '.join(parts)})""")
    con.execute("""
        CREATE OR REPLACE TEMP TABLE rewards AS
        SELECT patient_id, _step,
               list_reduce(list_sort(list(reward)), lambda acc, x: acc + x, 0.0::DOUBLE) AS _reward
        FROM stepped WHERE reward IS NOT NULL GROUP BY patient_id, _step""")
    con.execute(f"""
        COPY (
          SELECT patient_id, traj_index, k::INT AS t, state, _action AS action,
                 _prob AS behavior_prob, coalesce(_reward, 0.0::DOUBLE) AS reward, next_state,
                 (_next_ord = 2 AND _ended) AS terminal, (_next_ord = 2 AND NOT _ended) AS truncated
          FROM (SELECT *, lead(state) OVER w AS next_state, lead(_ord) OVER w AS _next_ord
                FROM stepped WHERE _ord >= 1 WINDOW w AS (PARTITION BY patient_id ORDER BY k))
          JOIN idx USING (patient_id) LEFT JOIN rewards USING (patient_id, _step)
          WHERE _ord = 1 ORDER BY traj_index, t
        ) TO {_lit(path)} (FORMAT parquet)""")


def ingest_duckdb(root: str, dataset: str, settings: Any, out: str) -> dict[str, Any]:
    """Bronze -> transitions and rejected rows of ``dataset`` under the lake ``root``.

    Returns ``{"rows_in": int, "transitions": int, "trajectories": int, "terminal": int,
    "counts": {(table, reason or None): n}}`` and writes ``out/ref-transitions/part-*.parquet``,
    ``out/ref-rejected_events.parquet``.
    """
    import duckdb
    from deltalake import DeltaTable

    from gpope.shell.pipeline import ingest_frames as rules

    con = duckdb.connect()
    con.execute("SET threads = 2")
    con.execute("SET memory_limit = '4GB'")
    con.execute(f"SET temp_directory = {_lit(out + '/duckdb-tmp')}")
    con.execute("SET preserve_insertion_order = false")
    for name in ("observations", "treatments", "outcomes"):
        data = DeltaTable(f"{root}/bronze/{dataset}/{name}").to_pyarrow_dataset()
        con.register(f"raw_{name}", data)
    L = int(settings.max_length)
    variables = list(settings.variables)
    term = settings.terminal_variable
    configured = list(dict.fromkeys([*variables, *filter(None, [term])]))
    actions = list(settings.actions)

    con.execute(f"""
        CREATE TEMP TABLE overflow AS
        SELECT patient_id, true AS _overflow FROM raw_outcomes
        WHERE patient_id IS NOT NULL AND time IS NOT NULL AND NOT {NONFINITE.format(x="reward")}
        GROUP BY patient_id HAVING {NONFINITE.format(x="sum(abs(reward))")}""")
    ovf = "coalesce(_overflow, false)"
    # treatments
    reason = _first_reason([
        ("patient_id IS NULL", rules.NULL_PATIENT), ("time IS NULL", rules.NULL_TIME),
        ("action IS NULL", rules.NULL_ACTION),
        (NONFINITE.format(x="propensity"), rules.BAD_PROPENSITY),
        ("propensity <= 0 OR propensity > 1", rules.PROPENSITY_RANGE),
        (f"action NOT IN {_in(actions)}", rules.UNKNOWN_ACTION), (ovf, rules.REWARD_OVERFLOW),
    ])  # fmt: skip
    con.execute(f"""CREATE TEMP TABLE t0 AS SELECT patient_id, time, action, propensity,
                    {reason} AS _reason FROM raw_treatments LEFT JOIN overflow USING (patient_id)""")
    _duplicates(con, "t0", "t1", ("time", "action", "propensity"), ("time",))
    con.execute(f"""
        CREATE TEMP TABLE treat AS
        SELECT * EXCLUDE (_reason), {_add(f"_k >= {L}", rules.BEYOND_MAX_LENGTH)} AS _reason
        FROM (SELECT *, CASE WHEN _reason IS NULL THEN sum((_reason IS NULL)::BIGINT) OVER
                (PARTITION BY patient_id ORDER BY time ASC NULLS FIRST
                 ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) - 1 END AS _k FROM t1)""")
    con.execute(f"""
        CREATE TEMP TABLE patients AS
        SELECT patient_id, min(time) AS _first_time,
               max(CASE WHEN _k < {L} THEN time END) AS _last_time,
               max(time) AS _last_valid_time,
               min(CASE WHEN _k = {L} THEN time END) AS _cut_time,
               sum((_k < {L})::INT) AS _n_steps
        FROM treat WHERE _reason IS NULL OR _reason = {_lit(rules.BEYOND_MAX_LENGTH)}
        GROUP BY patient_id""")
    # observations
    reason = _first_reason([
        ("patient_id IS NULL", rules.NULL_PATIENT), ("time IS NULL", rules.NULL_TIME),
        ("variable IS NULL", rules.NULL_VARIABLE), (NONFINITE.format(x="value"), rules.BAD_VALUE),
        (f"variable NOT IN {_in(configured)}", rules.UNCONFIGURED_VARIABLE),
        (ovf, rules.REWARD_OVERFLOW),
    ])  # fmt: skip
    con.execute(f"""CREATE TEMP TABLE o0 AS SELECT patient_id, time, variable, value,
                    {reason} AS _reason FROM raw_observations LEFT JOIN overflow USING (patient_id)""")
    _duplicates(con, "o0", "o1", ("variable", "time", "value"), ("variable", "time"))
    obs_reason = _add("_first_time IS NULL", rules.NO_TREATMENT)
    obs_reason = f"coalesce({obs_reason}, CASE WHEN time > _cut_time THEN {_lit(rules.BEYOND_MAX_LENGTH)} END)"
    if term is not None and term not in variables:
        obs_reason = (f"coalesce({obs_reason}, CASE WHEN variable = {_lit(term)} AND time <= "
                      f"_last_valid_time THEN {_lit(rules.TERMINAL_BEFORE_LAST_TREATMENT)} END)")
    con.execute(f"""CREATE TEMP TABLE obs AS SELECT * EXCLUDE (_reason), {obs_reason} AS _reason
                    FROM o1 LEFT JOIN patients USING (patient_id)""")
    # outcomes
    reason = _first_reason([
        ("patient_id IS NULL", rules.NULL_PATIENT), ("time IS NULL", rules.NULL_TIME),
        (NONFINITE.format(x="reward"), rules.BAD_REWARD), (ovf, rules.REWARD_OVERFLOW),
    ])  # fmt: skip
    con.execute(f"""CREATE TEMP TABLE u0 AS SELECT patient_id, time, reward, {reason} AS _reason
                    FROM raw_outcomes LEFT JOIN overflow USING (patient_id)""")
    _duplicates(con, "u0", "u1", ("time", "reward"), None)
    out_reason = _add("_first_time IS NULL", rules.NO_TREATMENT)
    out_reason = f"coalesce({out_reason}, CASE WHEN time > _cut_time THEN {_lit(rules.BEYOND_MAX_LENGTH)} END)"
    out_reason = (f"coalesce({out_reason}, CASE WHEN time <= _first_time THEN "
                  f"{_lit(rules.OUTCOME_BEFORE_FIRST_TREATMENT)} END)")
    con.execute(f"""CREATE TEMP TABLE outs AS SELECT * EXCLUDE (_reason), {out_reason} AS _reason
                    FROM u1 LEFT JOIN patients USING (patient_id)""")
    # the event stream, one window pass per patient
    action_index = "CASE " + " ".join(f"WHEN action = {_lit(a)} THEN {i}" for i, a in enumerate(actions)) + " END"
    null = ("NULL::TIMESTAMPTZ AS time", "NULL::BIGINT AS k", "NULL::VARCHAR AS variable",
            "NULL::DOUBLE AS value", "NULL::DOUBLE AS reward", "NULL::INT AS _action",
            "NULL::DOUBLE AS _prob", "NULL::BOOLEAN AS _terminal")  # fmt: skip

    def events(src: str, where: str, end: int, order: int, **given: str) -> str:
        cols = []
        for item in null:
            name = item.rsplit(" AS ", 1)[1]
            cols.append(f"{given[name]} AS {name}" if name in given else item)
        return (f"SELECT patient_id, {end} AS _end, {order} AS _ord, {', '.join(cols)} "
                f"FROM {src} WHERE {where}")

    parts = [
        events("treat", "_reason IS NULL", 0, 1, time="time", k="_k", _action=action_index,
               _prob="propensity"),
        events("obs", f"_reason IS NULL AND variable IN {_in(variables)}", 0, 0, time="time",
               variable="variable", value="value"),
        events("outs", "_reason IS NULL", 0, 0, time="time", reward="reward"),
        events("patients", "true", 1, 2, k="_n_steps"),
    ]  # fmt: skip
    if term is not None:
        parts.append(events(
            "obs", f"_reason IS NULL AND variable = {_lit(term)} AND time > _last_time "
            "AND _cut_time IS NULL", 0, 0, time="time", _terminal="true"))  # fmt: skip
    con.execute("""
        CREATE TEMP TABLE idx AS
        SELECT patient_id, (row_number() OVER (ORDER BY patient_id) - 1)::BIGINT AS traj_index
        FROM patients""")
    # The window pass over the event stream runs per bucket of patients (DuckDB's window
    # operator holds its input in memory: 1e6 patients ran out of the 4 GB limit in one piece).
    rows = sum(int(con.execute(f"SELECT count(*) FROM {t}").fetchone()[0])
               for t in ("treat", "obs", "outs"))
    buckets = max(1, -(-rows // ROWS_PER_BUCKET))
    Path(out, "ref-transitions").mkdir(parents=True, exist_ok=True)
    for bucket in range(buckets):
        where = f"hash(patient_id) % {buckets} = {bucket}"
        _stream(con, [f"SELECT * FROM ({part}) WHERE {where}" for part in parts], settings,
                f"{out}/ref-transitions/part-{bucket:05d}.parquet")
    raw = {"observations": ("patient_id", "time", "variable", "value"),
           "treatments": ("patient_id", "time", "action", "propensity"),
           "outcomes": ("patient_id", "time", "reward")}  # fmt: skip
    annotated = {"observations": "obs", "treatments": "treat", "outcomes": "outs"}
    rejected = " UNION ALL ".join(
        f"SELECT {_lit(t)} AS \"table\", _reason AS reason, to_json(struct_pack("
        f"{', '.join(raw[t])})) AS row FROM {src} WHERE _reason IS NOT NULL"
        for t, src in annotated.items()
    )
    con.execute(f"""COPY ({rejected} ORDER BY "table", reason, row)
                    TO {_lit(out + '/ref-rejected_events.parquet')} (FORMAT parquet)""")
    counts = {}
    for t, src in annotated.items():
        for r, n in con.execute(f"SELECT _reason, count(*) FROM {src} GROUP BY _reason").fetchall():
            counts[(t, r)] = int(n)
    n, m, terminal = con.execute(
        f"SELECT count(*), count(DISTINCT traj_index), count(*) FILTER (WHERE terminal) "
        f"FROM {_lit(out + '/ref-transitions/*.parquet')}").fetchone()
    con.close()
    return {"rows_in": sum(counts.values()), "transitions": int(n), "trajectories": int(m),
            "terminal": int(terminal), "counts": counts}


def check_against(result: dict[str, Any], out: str, transitions: Any, counts: dict) -> None:
    """Assert the reference equals the stage: ``transitions`` (Arrow, the silver table) and
    ``counts`` (``(table, reason or None) -> n``)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    ref = pq.read_table(out + "/ref-transitions")
    ref = ref.take(pc.sort_indices(ref, [("traj_index", "ascending"), ("t", "ascending")]))
    got = transitions.select(ref.column_names)
    got = got.take(pc.sort_indices(got, [("traj_index", "ascending"), ("t", "ascending")]))
    assert result["counts"] == counts, (result["counts"], counts)
    for name in ref.column_names:
        a, b = ref.column(name).to_pylist(), got.column(name).to_pylist()
        assert a == b, (name, [(x, y) for x, y in zip(a, b, strict=True) if x != y][:5])
