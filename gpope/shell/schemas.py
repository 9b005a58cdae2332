"""The table contracts of docs/ARCHITECTURE.md section 2, defined once as Spark schemas.

Column names and types here are the contract every job writes and every reader relies on; the
table layer validates DataFrames against them before committing.
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from gpope.shell.ledger_comments import LEDGER_COMMENTS

__all__ = ["COLUMN_COMMENTS", "OBSERVATIONS", "OUTCOMES", "PIPELINE_RUNS", "PRIVACY_LEDGER",
           "REJECTED_EVENTS", "RELEASED_COUNTS", "RELEASED_ESTIMATES", "RELEASED_VALUES",
           "SIMULATION", "TABLE_SCHEMAS", "TRAJECTORY_STATS", "TRANSITIONS", "TREATMENTS",
           "with_comments"]


def _schema(*fields: tuple[str, object, bool]) -> StructType:
    return StructType([StructField(name, dtype, nullable) for name, dtype, nullable in fields])  # type: ignore[arg-type]


# bronze: raw, as delivered (nullable: bad rows are quarantined by ingest, not refused on write)
OBSERVATIONS = _schema(
    ("patient_id", StringType(), True),
    ("time", TimestampType(), True),
    ("variable", StringType(), True),
    ("value", DoubleType(), True),
)
TREATMENTS = _schema(
    ("patient_id", StringType(), True),
    ("time", TimestampType(), True),
    ("action", StringType(), True),
    ("propensity", DoubleType(), True),
)
OUTCOMES = _schema(
    ("patient_id", StringType(), True),
    ("time", TimestampType(), True),
    ("reward", DoubleType(), True),
)

# bronze, written by `gpope simulate` only: what the simulated cohort is (never its seed), so
# later stages need not be told again (ingest reads the domain and the episode cap from it)
SIMULATION = _schema(
    ("domain", StringType(), False),
    ("patients", LongType(), False),
    ("max_length", IntegerType(), False),
    ("created_at", TimestampType(), False),
)

# silver
TRANSITIONS = _schema(
    ("patient_id", StringType(), False),
    ("traj_index", LongType(), False),
    ("t", IntegerType(), False),
    ("state", ArrayType(DoubleType(), False), False),
    ("action", IntegerType(), False),
    ("behavior_prob", DoubleType(), True),
    ("reward", DoubleType(), False),
    ("next_state", ArrayType(DoubleType(), False), False),
    ("terminal", BooleanType(), False),
    ("truncated", BooleanType(), False),
)
REJECTED_EVENTS = _schema(
    ("table", StringType(), False),
    ("reason", StringType(), False),
    ("row", StringType(), False),
)

# gold
TRAJECTORY_STATS = _schema(
    ("spec_id", StringType(), False),
    ("traj_index", LongType(), False),
    ("tau", IntegerType(), False),
    ("A", ArrayType(DoubleType(), False), False),
    ("b", ArrayType(DoubleType(), False), False),
    ("C", ArrayType(DoubleType(), False), False),
    ("policy_terms", ArrayType(DoubleType(), False), True),
)
RELEASED_ESTIMATES = _schema(
    ("run_id", StringType(), False),
    ("dataset", StringType(), False),
    ("spec_id", StringType(), False),
    ("policy", StringType(), False),
    ("epsilon", DoubleType(), False),
    ("delta", DoubleType(), False),
    ("accountant", StringType(), False),
    ("created_at", TimestampType(), False),
    ("theta", ArrayType(DoubleType(), False), False),
    ("reference_states", ArrayType(StringType(), False), False),
    ("values", ArrayType(DoubleType(), False), False),
    ("private", BooleanType(), False),  # False: fixed seed (experiments/tests), not a DP release
    ("estimator", StringType(), False),  # gpope | ssp
)
RELEASED_VALUES = _schema(
    ("run_id", StringType(), False),
    ("dataset", StringType(), False),
    ("spec_id", StringType(), False),
    ("spec_name", StringType(), False),
    ("estimator", StringType(), False),
    ("state", StringType(), False),
    ("value", DoubleType(), False),
    ("lower", DoubleType(), True),
    ("upper", DoubleType(), True),
    ("lower_bound", DoubleType(), True),
    ("ci_level", DoubleType(), True),
    ("epsilon", DoubleType(), False),
    ("delta", DoubleType(), False),
    ("accountant", StringType(), False),
    ("private", BooleanType(), False),
    ("created_at", TimestampType(), False),
    ("estimand", StringType(), True),  # added later: NULL on older rows
)
PRIVACY_LEDGER = _schema(
    ("dataset", StringType(), False),
    ("run_id", StringType(), False),
    ("mechanism", StringType(), False),
    ("epsilon", DoubleType(), False),
    ("delta", DoubleType(), False),
    ("accountant", StringType(), False),
    ("status", StringType(), False),
    ("created_at", TimestampType(), False),
    # added later (NULL on older rows); see gpope.shell.pipeline.ledger_store.LEDGER_COMMENTS
    ("kind", StringType(), True),
    ("charged_epsilon", DoubleType(), True),
    ("charged_delta", DoubleType(), True),
    ("valid_bound", BooleanType(), True),
    ("actor", StringType(), True),
    ("process", StringType(), True),
    ("note", StringType(), True),
)
PIPELINE_RUNS = _schema(  # the manifest of multi-table steps (gpope.shell.lake.manifest)
    ("run_id", StringType(), False),
    ("stage", StringType(), False),
    ("dataset", StringType(), False),
    ("key", StringType(), True),
    ("tables", MapType(StringType(), LongType(), False), False),
    ("details", StringType(), True),
    ("created_at", TimestampType(), False),
)

RELEASED_COUNTS = _schema(  # gold, shared: one released m~ per (dataset, statistics version)
    ("dataset", StringType(), False),
    ("stats_version", LongType(), False),
    ("m_noisy", LongType(), False),
    ("noise_std", DoubleType(), False),
    ("epsilon", DoubleType(), False),
    ("delta", DoubleType(), False),
    ("private", BooleanType(), False),
    ("run_id", StringType(), False),
    ("created_at", TimestampType(), False),
)

COLUMN_COMMENTS: dict[str, dict[str, str]] = {
    "released_counts": {
        "dataset": "the dataset whose number of patients is released",
        "stats_version": "the version of gold trajectory_stats the count was taken at",
        "m_noisy": "the released number of patients m~ = max(1, m + discrete Gaussian noise)",
        "noise_std": "the std of the count's noise (add/remove sensitivity 1)",
        "epsilon": "what the count is charged (RDP-calibrated, add/remove-one)",
        "delta": "the delta of that charge",
        "private": "false when drawn from a fixed seed (reproducible, NOT private)",
        "run_id": "the count's ledger run id (gold/privacy_ledger)",
        "created_at": "when the count was released (UTC)",
    },
    # Column comments (units, scale, meaning). The table layer writes them as Delta column
    # metadata ("comment"), where `gpope query --describe`, Spark's DESCRIBE and Unity Catalog
    # show them. Per-spec numbers (gamma, reward_scale, feature map) live in the spec file named by
    # spec_id/spec_name (conf/specs/*.yaml; logged with every MLflow run as spec.yaml).
    "observations": {
        "patient_id": "patient identifier as delivered (pseudonymised upstream)",
        "time": "time of the observation (UTC, microseconds)",
        "variable": "name of the measured variable (the dataset's configured state variables)",
        "value": "measured value, in the variable's own unit as delivered",
    },
    "treatments": {
        "patient_id": "patient identifier as delivered",
        "time": "time of the treatment decision (UTC); one decision step per row",
        "action": "treatment given, a label of the dataset's action vocabulary",
        "propensity": "probability of this action under the logged behaviour policy, in (0, 1]; optional (no column: not logged, estimated privately)",
    },
    "outcomes": {
        "patient_id": "patient identifier as delivered",
        "time": "time of the outcome (UTC)",
        "reward": "outcome in the dataset's raw reward unit (not scaled by any spec)",
    },
    "simulation": {
        "domain": "public simulator that produced the dataset's bronze tables (chain, "
        "mountaincar, hiv)",
        "patients": "number of simulated patients (episodes)",
        "max_length": "episode cap: decisions recorded per patient at most",
        "created_at": "time of the simulation (UTC); the seed is never recorded",
    },
    "transitions": {
        "patient_id": "patient identifier (one trajectory per patient)",
        "traj_index": "dense trajectory index 0..m-1 of the dataset",
        "t": "decision step within the trajectory, 0-based",
        "state": "state vector at the step (configured variables, forward-filled, raw units)",
        "action": "action index in the dataset's action vocabulary",
        "behavior_prob": "logged probability of the action under the behaviour policy (null: not logged)",
        "reward": "sum of raw outcome rewards in (this step, next step], raw reward unit",
        "next_state": "state vector at the next step (raw units)",
        "terminal": "true: the episode really ended here (next features are zero)",
        "truncated": "true: the record stops here without a terminal event (next state kept)",
    },
    "rejected_events": {
        "table": "raw table the row came from (observations, treatments, outcomes)",
        "reason": "why the row cannot be used",
        "row": "the raw row as JSON",
    },
    "trajectory_stats": {
        "spec_id": "id of the evaluation spec (hash of feature map, target policy, gamma, "
        "normalization, length_scale, reward_scale); partition column",
        "traj_index": "trajectory index (transitions.traj_index)",
        "tau": "number of decision steps of the trajectory",
        "A": "A_i = w_i sum_t rho_t phi_t (phi_t - gamma phi_t+1)^T, n x n row-major; gamma, "
        "features and weight w_i (1/length_scale or 1/tau) from the spec",
        "b": "b_i = w_i sum_t rho_t (reward_scale r_t) phi_t, length n; rewards times the spec's "
        "reward_scale",
        "C": "C_i = w_i sum_t phi_t phi_t^T, n x n row-major (symmetric)",
        "policy_terms": "(g, a, n, phi(s_0)...) of the policy value release (gpope.core.policy_value): "
                        "the discounted return, its clipped importance-weighted version and the "
                        "clipped weight mass, raw reward units, then the first state's features (the "
                        "direct method's); null when the spec lacks a public bound",
    },
    "released_estimates": {
        "run_id": "gpope run id (also the MLflow tag gpope.run_id and privacy_ledger.run_id)",
        "dataset": "dataset (cohort) evaluated",
        "spec_id": "id of the evaluation spec (trajectory_stats.spec_id)",
        "policy": "public label of the evaluated target policy",
        "epsilon": "epsilon spent by the run (reserved in privacy_ledger)",
        "delta": "delta spent by the run",
        "accountant": "privacy accountant that calibrated the noise (pld, rdp, paper)",
        "created_at": "release time (UTC)",
        "theta": "released weights: V(s) = theta . phi(s) / reward_scale of the spec",
        "reference_states": "names of the spec's public reference states (parallel to values)",
        "values": "V at each reference state, discounted with the spec's gamma, in the raw reward "
        "unit (reward_scale undone); parallel to reference_states",
        "private": "true: a differentially private release; false: fixed seed, NOT private",
        "estimator": "private estimator that produced theta: gpope (gradient-perturbed GTD2) or ssp "
        "(one-shot LSTD on noisy sufficient statistics)",
    },
    "released_values": {
        "run_id": "gpope run id (released_estimates.run_id, MLflow tag gpope.run_id)",
        "dataset": "dataset (cohort) evaluated",
        "spec_id": "id of the evaluation spec",
        "spec_name": "name of the evaluation spec",
        "estimator": "gpope or ssp (see released_estimates.estimator)",
        "state": "name of the spec's public reference state",
        "value": "released V(state), discounted with the spec's gamma, in the raw reward unit",
        "lower": "lower end of the two-sided ci_level interval (privacy noise + sampling "
        "variability; parametric bootstrap over the noisy statistics releases); null: no interval",
        "upper": "upper end of the two-sided ci_level interval; null: no interval",
        "lower_bound": "one-sided lower confidence bound at ci_level: V(state) >= lower_bound; "
        "null: no interval",
        "ci_level": "confidence level of lower/upper/lower_bound (e.g. 0.95); null: no interval",
        "epsilon": "epsilon spent by the run (covers value and interval)",
        "delta": "delta spent by the run",
        "accountant": "privacy accountant that calibrated the noise (pld, rdp, paper)",
        "private": "true: a differentially private release; false: fixed seed, NOT private",
        "created_at": "release time (UTC), equal to released_estimates.created_at",
        "estimand": "what value and its interval estimate: a V row the tabular fixed point (the "
        "target's value) or the LSTD fixed point of the spec's features (its interval does not "
        "cover the map's approximation error); policy_value the direct method (E over first "
        "states of the fit's V(s0)) or the identified set (expected discounted return over the "
        "recorded horizon) or, without logged propensities, the public value range; "
        "behaviour_value the mean recorded discounted return; policy_contrast that J(target) "
        "minus it; null: released before the column",
    },
    # the ledger defines its own comments (it is written without Spark on a local lake)
    "privacy_ledger": dict(LEDGER_COMMENTS),
    "pipeline_runs": {
        "run_id": "stage run id (for a release: the evaluation's run_id); tables written by the "
        "run carry it in their commit's userMetadata",
        "stage": "simulate | ingest | stats | release",
        "dataset": "dataset (cohort) the stage worked on",
        "key": "what the run is about within its stage (e.g. spec_id), or null",
        "tables": "table (layer/dataset/table) -> Delta version this run committed; this row's "
        "commit makes all of them visible at once",
        "details": "JSON facts about the run (input table versions, row counts)",
        "created_at": "commit time of the manifest (UTC)",
    },
}


def with_comments(table: str, schema: StructType) -> StructType:
    """``schema`` with each field's ``comment`` metadata from :data:`COLUMN_COMMENTS`."""
    comments = COLUMN_COMMENTS.get(table, {})
    return StructType([
        StructField(f.name, f.dataType, f.nullable,
                    {**(f.metadata or {}), "comment": comments[f.name]}
                    if f.name in comments else f.metadata)
        for f in schema.fields
    ])


TABLE_SCHEMAS: dict[str, StructType] = {
    "observations": OBSERVATIONS,
    "treatments": TREATMENTS,
    "outcomes": OUTCOMES,
    "simulation": SIMULATION,
    "transitions": TRANSITIONS,
    "rejected_events": REJECTED_EVENTS,
    "trajectory_stats": TRAJECTORY_STATS,
    "released_estimates": RELEASED_ESTIMATES,
    "released_values": RELEASED_VALUES,
    "privacy_ledger": PRIVACY_LEDGER,
    "pipeline_runs": PIPELINE_RUNS,
    "released_counts": RELEASED_COUNTS,
}
# Every contract carries its column comments (written as Delta column metadata on table creation).
TABLE_SCHEMAS = {name: with_comments(name, schema) for name, schema in TABLE_SCHEMAS.items()}
