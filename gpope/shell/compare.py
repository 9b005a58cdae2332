"""Contrast two released runs on one dataset (``gpope compare``, :func:`gpope.api.compare_runs`).

Reads the two runs' rows of ``released_values`` (the reference states' V and the policy value
rows) through the query views and contrasts them with :mod:`gpope.core.compare`: released
numbers only, no private table read, no budget spent. Optionally logs the differences and their
figure to MLflow.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpope.errors import ConfigError

if TYPE_CHECKING:
    from gpope.config import GpopeConfig
    from gpope.core.compare import Difference, ReleasedQuantity

__all__ = ["RunComparison", "compare_runs", "difference_figure", "track_comparison"]


@dataclass(frozen=True)
class RunComparison:
    """Run A against run B on ``dataset``: one :class:`~gpope.core.compare.Difference` per
    quantity both released with an interval.

    ``labels``: run id -> ``"<spec name> (<run id prefix>)"``; ``estimands``: quantity -> both
    runs' estimands; ``mlflow_run_id``: None when not tracked.
    """

    dataset: str
    run_a: str
    run_b: str
    labels: dict[str, str]
    differences: tuple[Difference, ...]
    estimands: dict[str, tuple[str | None, str | None]]
    mlflow_run_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: an unbounded end is null; ``mlflow_run_id`` only when tracked."""
        from gpope.core.compare import sentence

        out: dict[str, Any] = {
            "dataset": self.dataset, "run_a": self.run_a, "run_b": self.run_b,
            "differences": [{"quantity": d.name, "value": d.value, "lower": _finite(d.lower),
                             "upper": _finite(d.upper), "level": d.level, "verdict": d.verdict,
                             "sentence": sentence(d, label_a="A", label_b="B"),
                             "estimand_a": self.estimands[d.name][0],
                             "estimand_b": self.estimands[d.name][1]}
                            for d in self.differences]}
        if self.mlflow_run_id is not None:
            out["mlflow_run_id"] = self.mlflow_run_id
        return out

    def summary(self) -> str:
        """One sentence per quantity, and a note where the two rows estimate different things."""
        from gpope.core.compare import sentence

        lines = [f"A = {self.labels[self.run_a]}, B = {self.labels[self.run_b]}, dataset "
                 f"{self.dataset}: A - B, from the released intervals only (no budget)"]
        for d in self.differences:
            lines.append(sentence(d))
            a, b = self.estimands[d.name]
            if None not in (a, b) and a != b:
                lines.append(f"  NOTE: A's row estimates \"{a}\", B's \"{b}\": the difference "
                             "mixes two estimands.")
        return "\n".join(lines)


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _quantity(row: dict[str, Any]) -> ReleasedQuantity | None:
    from gpope.core.compare import ReleasedQuantity

    if row["ci_level"] is None:  # released without an interval: nothing to compare it by
        return None
    lo = -math.inf if row["lower"] is None else float(row["lower"])
    hi = math.inf if row["upper"] is None else float(row["upper"])
    return ReleasedQuantity(float(row["value"]), lo, hi, float(row["ci_level"]))


def compare_runs(config: GpopeConfig, dataset: str, run_a: str, run_b: str) -> RunComparison:
    """Run A minus run B per quantity both released on ``dataset`` with an interval.

    Raises:
        ConfigError: a run has no released row on the dataset (named, with what to check).
    """
    from gpope.core.compare import compare_released
    from gpope.shell.query import query

    sql = ("SELECT run_id, dataset, spec_name, estimator, state, value, lower, upper, ci_level, "
           "epsilon, estimand FROM released_values WHERE dataset = " + _sql_string(dataset)
           + " AND run_id IN (" + _sql_string(run_a) + ", " + _sql_string(run_b) + ")")
    rows: dict[str, dict[str, Any]] = {run_a: {}, run_b: {}}
    for row in query(sql, lake=config).table.to_pylist():
        rows[row["run_id"]][row["state"]] = row
    for run in (run_a, run_b):
        if not rows[run]:
            raise ConfigError(
                f"Run {run!r} released nothing on dataset {dataset!r}. List the runs with "
                f"gpope query \"SELECT DISTINCT run_id, spec_name, created_at FROM released_values "
                f"WHERE dataset = '{dataset}'\".")
    a = {k: q for k, r in rows[run_a].items() if (q := _quantity(r)) is not None}
    b = {k: q for k, r in rows[run_b].items() if (q := _quantity(r)) is not None}
    diffs = tuple(compare_released(a, b))
    return RunComparison(
        dataset=dataset, run_a=run_a, run_b=run_b,
        labels={run: f"{next(iter(rows[run].values()))['spec_name']} ({run[:8]})"
                for run in (run_a, run_b)},
        differences=diffs,
        estimands={d.name: (rows[run_a][d.name]["estimand"], rows[run_b][d.name]["estimand"])
                   for d in diffs})


def difference_figure(diffs: tuple[Difference, ...], title: str) -> Any:
    """Matplotlib figure: each difference A - B with its interval (an unbounded end drawn to the
    axis edge and marked), and the zero line the verdicts read."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = list(range(len(diffs)))
    finite = [e for d in diffs for e in (d.lower, d.upper, d.value) if math.isfinite(e)]
    span = (max(finite) - min(finite)) if finite else 1.0
    lo_edge, hi_edge = min([*finite, 0.0]) - 0.2 * span, max([*finite, 0.0]) + 0.2 * span
    fig, ax = plt.subplots(figsize=(max(4.5, 1.2 * len(diffs) + 2.0), 3.6))
    for i, d in enumerate(diffs):
        lo = d.lower if math.isfinite(d.lower) else lo_edge
        hi = d.upper if math.isfinite(d.upper) else hi_edge
        colour = {"better": "tab:green", "worse": "tab:red"}.get(d.verdict, "tab:gray")
        ax.errorbar([i], [d.value], yerr=[[d.value - lo], [hi - d.value]], fmt="o", capsize=6,
                    color=colour)
        if not (math.isfinite(d.lower) and math.isfinite(d.upper)):
            ax.annotate("unbounded", (i, hi), fontsize=7, ha="center", va="bottom")
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set_xticks(x, [d.name for d in diffs])
    ax.set_ylim(lo_edge, hi_edge)
    level = f"{min(d.level for d in diffs):.0%}" if diffs else ""
    ax.set_ylabel(f"A - B, {level} interval (union bound)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


def track_comparison(comparison: RunComparison, config: GpopeConfig,
                     tracking_uri: str | None = None) -> RunComparison:
    """Log the comparison (its JSON and figure: released numbers only) to an MLflow run of the
    configuration's experiment; returns it with ``mlflow_run_id`` set."""
    import matplotlib.pyplot as plt
    import mlflow

    from gpope.shell import mlflow_names as names
    from gpope.shell.tracking import log_json_artifact, resolve_tracking_uri, start_run

    uri = resolve_tracking_uri(tracking_uri, config.tracking.uri, config.lake.root)
    c, label = comparison, comparison.labels
    with start_run(tracking_uri=uri, experiment=config.tracking.experiment,
                   run_name=f"compare | {c.dataset} | {label[c.run_a]} - {label[c.run_b]}",
                   tags={names.STAGE: "compare", names.DATASET: c.dataset,
                         names.COMPARED_RUN_A: c.run_a, names.COMPARED_RUN_B: c.run_b}) as run:
        log_json_artifact(c.to_dict(), "differences.json")
        fig = difference_figure(
            c.differences, f"{c.dataset}: A = {label[c.run_a]} minus B = {label[c.run_b]}")
        mlflow.log_figure(fig, "differences.png")
        plt.close(fig)
        return dataclasses.replace(c, mlflow_run_id=str(run.info.run_id))


def _finite(x: float) -> float | None:
    """JSON has no infinity: an unbounded end is null."""
    return x if math.isfinite(x) else None
