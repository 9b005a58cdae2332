"""Stage 2 of the pipeline: bronze event tables -> silver ``transitions`` and ``rejected_events``.

:func:`run_ingest` reads a dataset's bronze ``observations``, ``treatments`` and ``outcomes``,
applies the rules of :mod:`gpope.shell.pipeline.ingest_frames` (docs/ARCHITECTURE.md section 2) and replaces
the dataset's silver tables, each in one atomic Delta commit. It returns an :class:`IngestReport`
whose counts always balance: for each bronze table, rows in = rows used + rows rejected.

Guarantees: idempotent (re-running on the same bronze input overwrites the dataset's silver
tables with identical content, never appends); deterministic (``traj_index`` is the rank of
``patient_id``; rows are written sorted); linear in the number of events (Spark SQL operators
only, partitioned by patient).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpope.config import DatasetSettings, GpopeConfig
from gpope.errors import ConfigError, DataError
from gpope.shell.pipeline.ingest_frames import REASONS, SilverFrames, build_silver

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "BRONZE_TABLES",
    "IngestReport",
    "ingest_frames",
    "report_from_counts",
    "resolve_dataset_settings",
    "run_ingest",
]

#: The bronze tables ingest reads, in report order.
BRONZE_TABLES: tuple[str, ...] = ("observations", "treatments", "outcomes")


@dataclass(frozen=True)
class IngestReport:
    """What one ingest did; every count is exact.

    Attributes:
        dataset: the dataset name.
        rows_in: bronze rows read, per table.
        rows_used: rows that went into transitions, per table (treatments: one per transition;
            observations: every valid observation of a trajectory, superseded ones included;
            outcomes: every outcome summed into a reward).
        rejected: per table, the number of rejected rows per reason (reasons with 0 omitted).
        n_trajectories: m, the number of trajectories (= patients with a valid treatment).
        n_transitions: T, the number of silver transitions.
        n_terminal: episodes whose last step is terminal (the episode really ended: the value
            after it is 0).
        n_truncated: episodes whose record stops before ``max_length`` steps without a terminal
            event (the value after the last step is bootstrapped from its next state).
        n_length_capped: episodes that reached ``max_length`` steps without a terminal event (cut
            there, or ending exactly there; bootstrapped like a truncation).
        terminal_variable: the declared terminal variable (``datasets: terminal_variable``), or
            None: then no episode can be terminal, and every end is assumed a truncation.
        max_length: the dataset's public length cap L.
        no_terminal_events: the dataset declares that episodes never end (``datasets:
            no_terminal_events: true``), so the truncation assumption is the user's, not gpope's.
        unknown_at_first: per state variable whose absence is not declared, the patients with
            no observation of it at or before their first treatment (their first state took the
            default; :mod:`~gpope.shell.pipeline.ingest_first_state`).
        first_checked: the patients that check looked at (those with a timed treatment row).
    """

    dataset: str
    rows_in: dict[str, int]
    rows_used: dict[str, int]
    rejected: dict[str, dict[str, int]] = field(default_factory=dict)
    n_trajectories: int = 0
    n_transitions: int = 0
    n_terminal: int = 0
    n_truncated: int = 0
    n_length_capped: int = 0
    terminal_variable: str | None = None
    max_length: int | None = None
    no_terminal_events: bool = False
    unknown_at_first: dict[str, int] = field(default_factory=dict)
    first_checked: int = 0

    @property
    def warnings(self) -> list[str]:
        """One line per thing the user must know: how episodes end, then state variables that
        at least half of the patients had not been observed with at their first decision."""
        late = [
            f"WARNING: {n} of {self.first_checked} patients have no {v!r} observed at or before "
            f"their first treatment, so their first state took its default 0.0; if {v!r} is "
            "recorded after the decision it informs, every state is one step late and every "
            "released value is biased: fix its times (a state is what was known when deciding: "
            "docs/OWN_DATA.md, 'The bronze contract'), or, if it is really unknown at the start, "
            f"declare 'defaults: {{{v}: VALUE}}' or 'missing_indicators: true' under 'datasets:'."
            for v, n in self.unknown_at_first.items() if n > 0 and 2 * n >= self.first_checked]
        return [*self._end_warnings(), *late]

    def _end_warnings(self) -> list[str]:
        """One line per thing the user must know about how episodes end (empty: nothing).

        Without a declared ``terminal_variable``: a warning only when some episode stops before
        ``max_length`` (if every episode reached the cap, nothing was assumed) and the dataset
        does not declare ``no_terminal_events`` (then the assumption is the user's own).
        """
        if self.n_trajectories == 0 or self.n_terminal > 0:
            return []
        if self.terminal_variable is None:
            if self.no_terminal_events or self.n_truncated == 0:
                return []
            cap = f" {self.max_length}" if self.max_length else ""
            return [
                f"WARNING: {self.n_truncated} of {self.n_trajectories} episodes stop before "
                f"max_length{cap} and no terminal_variable is declared, so gpope ASSUMED each "
                "was truncated (the record stops but the episode goes on: the value after its "
                "last step is bootstrapped from its next state); if they really ended (death, "
                "discharge, goal), every released value is biased: declare the end event as "
                "'terminal_variable' under 'datasets:' and ingest again, or declare "
                "'no_terminal_events: true' to confirm the assumption (docs/OWN_DATA.md, 'How "
                "an episode ends')."
            ]
        return [
            f"WARNING: terminal_variable {self.terminal_variable!r} is declared but never observed "
            "after a patient's last treatment, so no episode is terminal; check the variable's "
            "name in the observations and that the event is recorded after the last treatment."
        ]

    def episode_ends(self) -> str:
        """One line: how the episodes ended and what was assumed."""
        cap = f" at the length cap {self.max_length}" if self.max_length else " at the length cap"
        assumed = (
            "" if self.terminal_variable is not None or self.n_truncated == 0
            else "; no_terminal_events declared: every early stop is a truncation"
            if self.no_terminal_events
            else "; no terminal_variable declared: every early stop assumed a truncation")
        return (f"episode ends: {self.n_terminal} terminal, {self.n_truncated} truncated "
                f"(record stops, bootstrapped), {self.n_length_capped}{cap}{assumed}")

    def rejected_total(self, table: str) -> int:
        """Rows of ``table`` that went to rejected_events."""
        return sum(self.rejected.get(table, {}).values())

    @property
    def balanced(self) -> bool:
        """True when rows in = used + rejected for every bronze table."""
        return all(
            self.rows_in[t] == self.rows_used[t] + self.rejected_total(t) for t in self.rows_in
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form (the ``--json`` output of ``gpope ingest``): the public fields (the
        dataset's declared settings) at the top; every noise-free count of the private rows (m,
        rows per reason, transitions, episode ends, the warnings' patient counts) under
        ``operator_only``, tagged ``diagnostic.private`` (m is released only as the noisy count
        m~, docs/ARCHITECTURE.md section 4)."""
        from gpope.shell.operator import OPERATOR_ONLY, operator_only

        return {
            "dataset": self.dataset,
            "terminal_variable": self.terminal_variable,
            "no_terminal_events": self.no_terminal_events,
            "max_length": self.max_length,
            OPERATOR_ONLY: operator_only({
                "n_trajectories": self.n_trajectories,
                "rows_in": dict(self.rows_in),
                "rows_used": dict(self.rows_used),
                "rejected": {t: dict(r) for t, r in self.rejected.items()},
                "n_transitions": self.n_transitions,
                "n_terminal": self.n_terminal,
                "n_truncated": self.n_truncated,
                "n_length_capped": self.n_length_capped,
                "balanced": self.balanced,
                "unknown_at_first": dict(self.unknown_at_first),
                "first_checked": self.first_checked,
                "warnings": self.warnings,
            }),
        }

    def summary(self) -> str:
        """A few human-readable lines: what was written, then the noise-free counts (m among
        them: it is released only as the noisy count m~) under the operator-only heading."""
        from gpope.shell.operator import HEADING

        lines = [
            f"ingest {self.dataset}: silver transitions written",
            HEADING,
            *(f"  {w}" for w in self.warnings),
            f"  {self.n_trajectories} trajectories (the exact m; released only as the noisy count "
            f"m~), {self.n_transitions} transitions ({self.n_terminal} terminal)",
            f"  {self.episode_ends()}",
        ]
        for table in self.rows_in:
            rej = self.rejected.get(table, {})
            detail = ", ".join(f"{reason}: {n}" for reason, n in sorted(rej.items()))
            lines.append(
                f"  {table}: {self.rows_in[table]} in = {self.rows_used[table]} used + "
                f"{self.rejected_total(table)} rejected" + (f" ({detail})" if detail else "")
            )
        return "\n".join(lines)


def resolve_dataset_settings(
    config: GpopeConfig, dataset: str, *, domain: str | None = None
) -> DatasetSettings:
    """The ingest settings of ``dataset``: from ``conf datasets:``, else from a simulated domain.

    A configured dataset that names only its ``domain`` (``datasets: {hiv_demo: {domain: hiv}}``)
    takes the simulated domain's settings (:func:`~.simulate.dataset_settings_for_domain`).

    Args:
        config: the loaded configuration.
        dataset: dataset name.
        domain: simulated domain (``chain``, ``mountaincar``, ``hiv``) whose event-table spec defines
            the settings when the dataset is not configured. Optional for a dataset written by
            ``gpope simulate``: its ``bronze/<dataset>/simulation`` record gives the domain and the
            episode cap (``max_length``).

    Raises:
        ConfigError: the dataset is not configured and no domain was given (the message says how
            to fix it), or the domain is unknown.
    """
    if dataset in config.datasets:
        configured = config.datasets[dataset]
        if configured.domain is not None and not configured.variables and not configured.actions:
            # ``datasets: {name: {domain: hiv}}``: a simulated cohort, read with its domain's spec
            from gpope.shell.pipeline.simulate import dataset_settings_for_domain

            return dataset_settings_for_domain(configured.domain)
        return configured
    from gpope.shell.pipeline.simulate import dataset_settings_for_domain, read_simulation_record

    simulated = read_simulation_record(config, dataset)
    if domain is None and simulated is None:
        raise ConfigError(
            f"Dataset {dataset!r} is not configured and was not written by `gpope simulate` in "
            f"the lake {str(config.lake.root)!r}: describe it under 'datasets:' in a conf file "
            f"and pass it with --conf (configured: {sorted(config.datasets) or 'none'}; "
            "docs/OWN_DATA.md, 'The datasets: entry'), or pass --domain "
            "{chain,mountaincar,hiv} for a simulated cohort."
        )
    if simulated is None:
        return dataset_settings_for_domain(domain)
    if domain is not None and domain != simulated["domain"]:
        raise ConfigError(
            f"Dataset {dataset!r} was simulated with domain {simulated['domain']!r} (see "
            f"bronze/{dataset}/simulation); got --domain {domain!r}. Drop --domain, or pass "
            f"--domain {simulated['domain']}."
        )
    return dataset_settings_for_domain(str(simulated["domain"]),
                                       max_length=int(simulated["max_length"]))


def ingest_frames(
    observations: DataFrame,
    treatments: DataFrame,
    outcomes: DataFrame,
    settings: DatasetSettings,
) -> SilverFrames:
    """The silver tables of three bronze DataFrames (lazy; see :func:`~.ingest_frames.build_silver`)."""
    return build_silver(observations, treatments, outcomes, settings)


def report_from_counts(
    dataset: str,
    rows_in: dict[str, int],
    counts: list[tuple[str, str | None, int]],
    *,
    n_trajectories: int,
    n_transitions: int,
    n_terminal: int,
    n_truncated: int = 0,
    n_length_capped: int = 0,
    settings: DatasetSettings | None = None,
    unknown_at_first: tuple[int, dict[str, int]] = (0, {}),
) -> IngestReport:
    """Assemble an :class:`IngestReport` from ``(table, reason or None, count)`` triples.

    Raises:
        DataError: the counts do not balance or there are more used treatments than transitions
            (a defect of ingest, never of the input).
    """
    used = dict.fromkeys(rows_in, 0)
    rejected: dict[str, dict[str, int]] = {t: {} for t in rows_in}
    for table, reason, n in counts:
        if reason is None:
            used[table] += n
        else:
            rejected[table][reason] = rejected[table].get(reason, 0) + n
    report = IngestReport(
        dataset=dataset,
        rows_in=dict(rows_in),
        rows_used=used,
        rejected={t: dict(sorted(r.items())) for t, r in rejected.items()},
        n_trajectories=n_trajectories,
        n_transitions=n_transitions,
        n_terminal=n_terminal,
        n_truncated=n_truncated,
        n_length_capped=n_length_capped,
        terminal_variable=settings.terminal_variable if settings is not None else None,
        max_length=settings.max_length if settings is not None else None,
        no_terminal_events=settings.no_terminal_events if settings is not None else False,
        unknown_at_first=dict(unknown_at_first[1]),
        first_checked=int(unknown_at_first[0]),
    )
    if not report.balanced or used["treatments"] != n_transitions:
        raise DataError(
            f"ingest of {dataset!r} lost rows (rows in != used + rejected, or used treatments != "
            "transitions; the counts are private and are not quoted). This is a bug in gpope; "
            "please report it."
        )
    unknown = {r for t, rs in rejected.items() for r in rs if r not in REASONS[t]}
    if unknown:  # pragma: no cover - defensive: reasons are constants of ingest_frames
        raise DataError(f"ingest produced undocumented rejection reasons {sorted(unknown)}.")
    return report


def run_ingest(
    spark: SparkSession,
    config: GpopeConfig,
    dataset: str,
    *,
    domain: str | None = None,
    settings: DatasetSettings | None = None,
) -> IngestReport:
    """Bronze -> silver for ``dataset``: replace its ``transitions`` and ``rejected_events``.

    Atomic: both tables become visible together in one ``pipeline_runs`` manifest commit, which
    also records the bronze versions read (the last complete cohort) and the counts; a run killed
    between the commits leaves the previous silver tables visible, so stored counts balance.

    Args:
        spark: the session.
        config: configuration (lake location, datasets).
        dataset: the dataset whose bronze tables are read.
        domain: simulated domain used for the settings when ``dataset`` is not in ``conf``.
        settings: explicit settings (overrides both).

    Returns:
        The :class:`IngestReport` (counts balance; checked before returning).

    Raises:
        ConfigError: no settings for the dataset, or data whose end convention is ambiguous
            with none declared (:mod:`~gpope.shell.pipeline.ingest_ends`; nothing written).
        TableNotFoundError: a bronze table is missing (run ``gpope simulate`` or load the data).
    """
    from pyspark.sql import functions as F

    from gpope.shell import faults
    from gpope.shell.lake import Lake, TableRef
    from gpope.shell.lake.manifest import PipelineRuns, new_run_id, read_pinned
    from gpope.shell.pipeline.ingest_contract import conform_bronze, propensities_logged
    from gpope.shell.pipeline.ingest_ends import check_end_convention
    from gpope.shell.pipeline.ingest_first_state import unknown_at_first_decision

    settings = settings or resolve_dataset_settings(config, dataset, domain=domain)
    target = Lake.from_settings(spark, config.lake)
    runs = PipelineRuns(config.lake, spark=spark)
    committed = runs.committed()
    bronze, inputs = {}, {}
    for t in BRONZE_TABLES:  # the last complete cohort, never a half-written one
        ref = TableRef("bronze", t, dataset)
        raw, inputs[str(ref)] = read_pinned(target, ref, committed=committed)
        if t == "treatments":
            logged = propensities_logged(raw.columns)  # the schema: public
        bronze[t] = conform_bronze(raw, t, str(ref))  # contract checked: one clear line
    # ambiguous data with no declared end convention: refused before anything is written
    check_end_convention(bronze["observations"], bronze["treatments"], settings, dataset)
    unknown_first = unknown_at_first_decision(bronze["observations"], bronze["treatments"],
                                              settings)
    rows_in = {t: bronze[t].count() for t in BRONZE_TABLES}
    frames = build_silver(
        bronze["observations"], bronze["treatments"], bronze["outcomes"], settings, logged=logged
    )
    run_id = new_run_id()
    transitions_ref = TableRef("silver", "transitions", dataset)
    rejected_ref = TableRef("silver", "rejected_events", dataset)
    try:  # both commits tagged: invisible until the manifest below
        written = {
            transitions_ref: target.write(
                frames.transitions, transitions_ref, mode="overwrite", run_id=run_id
            )
        }
        faults.point("ingest:transitions")
        written[rejected_ref] = target.write(
            frames.rejected_events, rejected_ref, mode="overwrite", run_id=run_id
        )
        faults.point("ingest:rejected_events")
        counts = [
            (r["table"], r["reason"], int(r["count"])) for r in frames.outcome_counts.collect()
        ]
    finally:
        frames.release()
    stored = target.read(transitions_ref, version=written[transitions_ref])
    cap = settings.max_length
    totals = stored.agg(
        F.count(F.lit(1)).alias("n"),
        F.countDistinct("traj_index").alias("m"),
        F.sum(F.col("terminal").cast("long")).alias("terminal"),
        F.sum((F.col("truncated") & (F.col("t") < cap - 1)).cast("long")).alias("truncated"),
        F.sum((F.col("truncated") & (F.col("t") >= cap - 1)).cast("long")).alias("capped"),
    ).collect()[0]
    report = report_from_counts(
        dataset,
        rows_in,
        counts,
        n_trajectories=int(totals["m"] or 0),
        n_transitions=int(totals["n"] or 0),
        n_terminal=int(totals["terminal"] or 0),
        n_truncated=int(totals["truncated"] or 0),
        n_length_capped=int(totals["capped"] or 0),
        settings=settings,
        unknown_at_first=unknown_first,
    )
    runs.commit(
        run_id=run_id, stage="ingest", dataset=dataset, tables=written,
        details={"inputs": inputs, "rows_in": report.rows_in, "rows_used": report.rows_used,
                 "rejected": report.rejected},
    )  # fmt: skip
    return report
