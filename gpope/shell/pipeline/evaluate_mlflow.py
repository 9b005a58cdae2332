"""The MLflow run of one evaluation: params, metrics, artifacts, and tagged private diagnostics.

What is logged as ordinary params/metrics is public or released (DESIGN.md 4): the public settings,
sigma, m, the spent (epsilon, delta), the released theta and its values, and the MSPBE of the
released iterates measured on PUBLIC evaluation data (a fresh cohort from the simulator of a
simulated dataset; post-processing of released values). Values computed from the private
statistics without noise (MSPBE, the LSTD fixed point) are logged only through
:func:`gpope.shell.tracking.log_private_diagnostics` (tag ``diagnostic.private=true``), and only
when the operator asks for them. The sample plan is never logged.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from gpope.config import GpopeConfig
    from gpope.core.gpope import GPOPEResult
    from gpope.core.spec import EvaluationSpec
    from gpope.shell.pipeline.evaluate import EvaluateOptions

__all__ = ["TrackingOutcome", "log_evaluation", "private_diagnostics", "value_plot"]


@dataclass(frozen=True)
class TrackingOutcome:
    """What the MLflow run recorded that the caller reports."""

    mlflow_run_id: str | None
    tracking_uri: str
    public_mspbe: float | None = None
    private_diagnostics: dict[str, Any] = field(default_factory=dict)


def value_plot(path: Path, names: list[str], values: np.ndarray, *, title: str,
               reference: dict[str, np.ndarray] | None = None,
               interval: tuple[np.ndarray, np.ndarray] | None = None,
               label: str = "GPOPE (released)") -> None:
    """Bar chart of value estimates at the named reference states (PNG at ``path``); the released
    series carries its interval ``(lower, upper)`` as error bars when given."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = {label: np.asarray(values, dtype=np.float64)}
    series.update(reference or {})
    fig, ax = plt.subplots(figsize=(max(4.0, 1.4 * len(names) + 2), 3.5))
    width = 0.8 / max(1, len(series))
    x = np.arange(len(names))
    for i, (name, vals) in enumerate(series.items()):
        err = None
        if i == 0 and interval is not None:
            lo, hi = (np.asarray(a, dtype=np.float64) for a in interval)
            err = np.vstack([vals - lo, hi - vals])
            name = f"{name}, interval"
        ax.bar(x + i * width, vals, width=width, label=name, yerr=err, capsize=4 if err is not None else 0)
    ax.set_xticks(x + width * (len(series) - 1) / 2, names)
    ax.set_ylabel("V(s)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def private_diagnostics(
    spec: EvaluationSpec, theta: np.ndarray, population: tuple[np.ndarray, np.ndarray, np.ndarray]
) -> dict[str, Any]:
    """MSPBE of the released theta and the LSTD fixed point on the PRIVATE statistics (not released).

    The LSTD solution is theta = argmin ||A theta - b|| (``A^-1 b`` when A is invertible) of the
    private population statistics; values are reported at the reference states.
    """
    from gpope.core.metrics import mspbe

    A, b, C = population
    lstd_theta = np.linalg.lstsq(A, b, rcond=None)[0]
    out: dict[str, Any] = {
        "mspbe_released_theta": float(mspbe(theta, A, b, C)),
        "mspbe_zero": float(mspbe(np.zeros_like(theta), A, b, C)),
        "lstd_theta": [float(v) for v in lstd_theta],
        "lstd_values": {
            k: float(v)
            for k, v in zip(spec.reference_names, spec.reference_values(lstd_theta), strict=True)
        },
    }
    return out


def log_evaluation(
    *,
    config: GpopeConfig,
    tracking_uri: str | None,
    run_id: str,
    dataset: str,
    spec: EvaluationSpec,
    options: EvaluateOptions,
    result: GPOPEResult,
    released_theta: np.ndarray,
    values: np.ndarray,
    m: int,
    sigma: float,
    spent_epsilon: float,
    accountant: str,
    batch_rate: float | None,
    path: str,
    spec_text: str | None,
    private_population: tuple[np.ndarray, np.ndarray, np.ndarray] | None,
    public_population: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    private_mspbe: tuple[float, float] | None = None,
    intervals: Any | None = None,
    estimator: str = "gpope",
    ssp: dict[str, Any] | None = None,
    tuning: dict[str, Any] | None = None,
) -> TrackingOutcome:
    """Create the evaluation's MLflow run and log everything listed in the module docstring."""
    import mlflow

    from gpope.config import to_mapping
    from gpope.core.metrics import mspbe
    from gpope.shell.tracking import (
        log_json_artifact,
        log_private_diagnostics,
        resolve_tracking_uri,
        start_run,
    )

    uri = resolve_tracking_uri(tracking_uri, config.tracking.uri, config.lake.root)
    seeded = options.seed is not None
    tags = {
        "gpope.run_id": run_id,
        "gpope.stage": "evaluate",
        "gpope.dataset": dataset,
        "gpope.spec_id": spec.spec_id,
        "gpope.private": str(bool(result.private)).lower(),
        "gpope.seeded": str(seeded).lower(),
        "gpope.privacy_note": result.privacy_note,
    }
    public_mspbe = None
    diagnostics: dict[str, Any] = {}
    with start_run(tracking_uri=uri, experiment=config.tracking.experiment,
                   run_name=f"evaluate {dataset} {spec.name}", tags=tags) as run:
        mlflow.log_params({
            "spec": spec.name,
            "spec_id": spec.spec_id,
            "dataset": dataset,
            "epsilon": options.epsilon,
            "delta": options.delta,
            "m": m,
            "N": options.iterations,
            "n_features": spec.n_features,
            "sigma": sigma,
            "clip": options.clip,
            "step_size": options.step_size,
            "step_schedule": options.step_schedule,
            "step_offset": options.step_offset,
            "averaging": options.averaging,
            "accountant": accountant,
            "sampling": options.sampling,
            "batch_rate": batch_rate,
            "seeded": seeded,
            "private": bool(result.private),
            "statistics_path": path,
            "trace_every": result.trace_steps[1] - result.trace_steps[0]
            if result.trace_steps is not None and len(result.trace_steps) > 1 else None,
        })
        if tuning is not None:  # --tune private: DP outputs of the tuning (not diagnostics)
            from gpope.shell.pipeline.private_tune import log_tuning

            log_tuning(tuning)
        mlflow.log_metrics({
            "spent_epsilon": float(spent_epsilon),
            "spent_delta": float(options.delta),
            "reserved_epsilon": float(options.epsilon),
        })
        mlflow.log_metrics({f"value.{k}": float(v)
                            for k, v in zip(spec.reference_names, values, strict=True)})
        mlflow.log_params({"estimator": estimator})
        if ssp is not None:
            mlflow.log_params({"statistics_sigma": ssp["sigma"], "ssp_clip": ssp["clip"],
                               "statistics_epsilon": ssp["epsilon"], "statistics_delta": ssp["delta"],
                               "ssp_groups": ssp["groups"]})
        if private_mspbe is not None:
            # post-processing of the run's noisy-statistics release: private, comparable on real data
            mlflow.log_metrics({"mspbe_private": float(private_mspbe[0]),
                                "relative_mspbe_private": float(private_mspbe[1])})
        if intervals is not None:
            mlflow.log_param("ci_level", float(intervals.level))
            for i, k in enumerate(spec.reference_names):
                mlflow.log_metrics({f"value_lower.{k}": float(intervals.lower[i]),
                                    f"value_upper.{k}": float(intervals.upper[i]),
                                    f"value_lower_bound.{k}": float(intervals.lower_bound[i])})
            log_json_artifact(dict(intervals.to_dict(), states=list(spec.reference_names)),
                              "intervals.json")
        if public_population is not None:
            A, b, C = public_population
            if result.trace_theta is not None:
                trace = np.atleast_1d(mspbe(result.trace_theta, A, b, C))
                for step, value in zip(result.trace_steps, trace, strict=True):
                    mlflow.log_metric("public_mspbe", float(value), step=int(step))
            public_mspbe = float(mspbe(released_theta, A, b, C))
            mlflow.log_metric("public_mspbe_final", public_mspbe)
            mlflow.log_metric("public_mspbe_zero", float(mspbe(np.zeros_like(released_theta), A, b, C)))
        log_json_artifact(
            {
                "run_id": run_id,
                "dataset": dataset,
                "spec_id": spec.spec_id,
                "theta": np.asarray(released_theta),
                "theta_final_iterate": np.asarray(result.theta),
                "reference_values": dict(zip(spec.reference_names, values.tolist(), strict=True)),
                "epsilon": options.epsilon,
                "delta": options.delta,
                "private": bool(result.private),
            },
            "theta.json",
        )
        log_json_artifact(to_mapping(config), "config.json")
        log_json_artifact(spec.to_dict(), "spec.json")
        with tempfile.TemporaryDirectory() as tmp:
            if spec_text is not None:
                (Path(tmp) / "spec.yaml").write_text(spec_text)
                mlflow.log_artifact(str(Path(tmp) / "spec.yaml"))
            if spec.reference_states:
                png = Path(tmp) / "values.png"
                value_plot(png, list(spec.reference_names), values,
                           title=f"{spec.name}: values at reference states (eps={options.epsilon:g})",
                           interval=None if intervals is None else (intervals.lower, intervals.upper),
                           label=f"{estimator.upper()} (released)")
                mlflow.log_artifact(str(png))
            (Path(tmp) / "options.json").write_text(json.dumps(_options_dict(options), indent=2))
            mlflow.log_artifact(str(Path(tmp) / "options.json"))
        if private_population is not None:
            diagnostics = private_diagnostics(spec, released_theta, private_population)
            flat = {
                "mspbe_released_theta": diagnostics["mspbe_released_theta"],
                "mspbe_zero": diagnostics["mspbe_zero"],
            }
            flat.update({f"lstd_value.{k}": v for k, v in diagnostics["lstd_values"].items()})
            log_private_diagnostics(
                flat,
                note="computed WITHOUT noise from the private trajectory statistics (MSPBE of the "
                "released theta, LSTD fixed point): for operators only, never released",
            )
        run_id_mlflow = run.info.run_id
    return TrackingOutcome(run_id_mlflow, uri, public_mspbe, diagnostics)


def _options_dict(options: EvaluateOptions) -> dict[str, Any]:
    return dict(options.__dict__)
