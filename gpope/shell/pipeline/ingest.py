"""Stage 2 of the pipeline: bronze event tables -> silver ``transitions`` and ``rejected_events``.

:func:`run_ingest` applies the rules of :mod:`gpope.shell.pipeline.ingest_frames` to a dataset's
bronze tables and replaces its silver tables. Guarantees: for each bronze table, rows in = rows
used + rows rejected; idempotent (a re-run overwrites with identical content); deterministic
(``traj_index`` is the rank of ``patient_id``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from gpope.config import DatasetSettings, GpopeConfig
from gpope.errors import ConfigError, DataError
from gpope.shell.pipeline.ingest_frames import REASONS, build_silver

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["BRONZE_TABLES", "IngestReport", "resolve_dataset_settings", "run_ingest"]

#: The bronze tables ingest reads, in report order.
BRONZE_TABLES: tuple[str, ...] = ("observations", "treatments", "outcomes")


@dataclass(frozen=True)
class IngestReport:
    """What one ingest did; every count is exact (noise-free: private diagnostics).

    Attributes:
        rows_in, rows_used: bronze rows read and rows that went into transitions, per table.
        rejected: per table, the number of rejected rows per reason (reasons with 0 omitted).
        n_trajectories, n_transitions: m and the number of silver transitions.
        n_terminal, n_truncated, n_length_capped: episodes whose last step is terminal, that
            stop before ``max_length`` without a terminal event (bootstrapped), and that reached
            ``max_length`` without one.
        terminal_variable, max_length, no_terminal_events: the dataset's declared settings.
        unknown_at_first: per state variable whose absence is not declared, the patients with
            no observation of it at or before their first treatment, among ``first_checked``
            (:mod:`~gpope.shell.pipeline.ingest_first_state`).
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
        """What the user must know about how episodes end: without a declared
        ``terminal_variable``, a warning only when some episode stops before ``max_length`` and
        ``no_terminal_events`` is not declared (nothing was assumed otherwise)."""
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
        return sum(self.rejected.get(table, {}).values())

    @property
    def balanced(self) -> bool:
        """True when rows in = used + rejected for every bronze table."""
        return all(
            self.rows_in[t] == self.rows_used[t] + self.rejected_total(t) for t in self.rows_in
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form (``gpope ingest --json``): the declared settings at the top; every
        noise-free count under ``operator_only``, tagged ``diagnostic.private``."""
        from gpope.shell.operator import OPERATOR_ONLY, operator_only

        declared = ("dataset", "terminal_variable", "no_terminal_events", "max_length")
        counts = {k: v for k, v in asdict(self).items() if k not in declared}
        return {**{k: getattr(self, k) for k in declared},
                OPERATOR_ONLY: operator_only({**counts, "balanced": self.balanced,
                                              "warnings": self.warnings})}

    def summary(self) -> str:
        """What was written, then the noise-free counts under the operator-only heading."""
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
    """The ingest settings of ``dataset``: from ``conf datasets:`` (one naming only its
    ``domain`` takes that domain's), else from the ``simulation`` record ``gpope simulate``
    wrote, else from ``domain``.

    Raises:
        ConfigError: the dataset is not configured and no domain was given, or the domain is
            unknown or differs from the recorded one.
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


def _report(
    dataset: str, rows_in: dict[str, int], counts: list[tuple[str, str | None, int]],
    totals: Any, settings: DatasetSettings, unknown_at_first: tuple[int, dict[str, int]],
) -> IngestReport:
    """The report of ``(table, reason or None, count)`` triples and the stored ``totals``.

    Raises:
        DataError: the counts do not balance or used treatments != transitions (a defect of
            ingest, never of the input).
    """
    used = dict.fromkeys(rows_in, 0)
    rejected: dict[str, dict[str, int]] = {t: {} for t in rows_in}
    for table, reason, n in counts:
        if reason is None:
            used[table] += n
        else:
            rejected[table][reason] = rejected[table].get(reason, 0) + n
    n_transitions = int(totals["n"] or 0)
    report = IngestReport(
        dataset=dataset, rows_in=dict(rows_in), rows_used=used,
        rejected={t: dict(sorted(r.items())) for t, r in rejected.items()},
        n_trajectories=int(totals["m"] or 0), n_transitions=n_transitions,
        n_terminal=int(totals["terminal"] or 0), n_truncated=int(totals["truncated"] or 0),
        n_length_capped=int(totals["capped"] or 0),
        terminal_variable=settings.terminal_variable, max_length=settings.max_length,
        no_terminal_events=settings.no_terminal_events,
        unknown_at_first=dict(unknown_at_first[1]), first_checked=int(unknown_at_first[0]),
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
    also records the bronze versions read and the counts. ``settings`` (default:
    :func:`resolve_dataset_settings` with ``domain``) are the dataset's.

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
    report = _report(dataset, rows_in, counts, totals, settings, unknown_first)
    runs.commit(
        run_id=run_id, stage="ingest", dataset=dataset, tables=written,
        details={"inputs": inputs, "rows_in": report.rows_in, "rows_used": report.rows_used,
                 "rejected": report.rejected},
    )  # fmt: skip
    return report
