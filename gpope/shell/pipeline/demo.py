"""The main job (``gpope demo``): a simulated HIV cohort through the whole private pipeline.

Stages, each with a progress bar: simulate (bronze) -> ingest (silver) -> stats (gold
trajectory_stats) -> evaluate at epsilon = 1, delta = 1e-5 (ledger, released_estimates, MLflow)
-> Monte Carlo ground truth at the reference states from the public simulator. A non-private
reference (the LSTD fixed point of the private statistics) is computed for comparison and logged
only as a tagged private diagnostic; the summary labels it "non-private diagnostic".

Design choices (stated in the summary too):

* **Horizon.** The HIV simulator integrates a stiff ODE per patient and decision; 200 decisions
  for thousands of patients take minutes on two cores, so the demo records the first
  ``steps`` (default 40) decisions of each patient (a public ``max_length``; the statistics'
  length scale stays the spec's 200, the episode length). ``--patients``/``--steps`` shrink it.
* **Repeated runs.** Every demo run simulates a NEW cohort, so it writes a new dataset
  ``hiv_demo_<UTC time>_<random>`` with its own (default) budget: a second run never fails on
  the budget of the first, and the ledger never mixes spends of different cohorts. Pass
  ``--dataset`` to reuse a name (then its budget applies).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from gpope.core.validation import check_int, check_number

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from gpope.config import GpopeConfig
    from gpope.core.spec import EvaluationSpec

__all__ = ["DEMO_SPEC_YAML", "DemoOptions", "DemoReport", "demo_spec", "run_demo"]

#: The demo's evaluation spec (identical to conf/specs/hiv_demo.yaml; a test checks it), embedded
#: so that ``gpope demo`` runs from an installed wheel without the repository's conf/.
DEMO_SPEC_YAML = """\
name: hiv_demo
domain: hiv
gamma: 0.98
normalization: transition
length_scale: 200
reward_scale: 1.0e-8
feature_map:
  kind: fourier
  order: 2
  low: [3.0, -1.0, -3.0, -3.0, -1.0, 0.0]
  high: [7.0, 4.0, 6.0, 4.0, 7.0, 6.0]
  max_coupling: 1
target_policy:
  artifact: hiv_q_v1
reference_states:
  unhealthy_start: [5.213712, 0.698970, 4.077186, 1.662758, 4.805630, 1.380211]
  healthy_equilibrium: [5.985803, 2.792756, 1.880882, 0.784746, 2.618446, 5.547908]
"""


def demo_spec() -> EvaluationSpec:
    """The embedded demo spec."""
    import yaml

    from gpope.core.spec import EvaluationSpec

    return EvaluationSpec.from_mapping(yaml.safe_load(DEMO_SPEC_YAML), where="demo spec")


@dataclass(frozen=True)
class DemoOptions:
    """Size and privacy of the demo (all public).

    Attributes:
        patients: simulated patients (one trajectory each).
        steps: decisions recorded per patient (the dataset's public max_length).
        epsilon, delta: the evaluation's privacy spend.
        dataset: dataset name; None: a fresh ``hiv_demo_<time>_<random>`` per run.
        seed: simulation seed (None: OS entropy). The evaluation itself always uses OS entropy.
        iterations: GPOPE steps (None: ``evaluation.iterations`` of the configuration).
        public_trajectories: public simulated cohort for MSPBE.
        progress: show progress bars.
    """

    patients: int = 2000
    steps: int = 40
    epsilon: float = 1.0
    delta: float = 1e-5
    dataset: str | None = None
    seed: int | None = None
    iterations: int | None = None
    public_trajectories: int = 200
    progress: bool = True

    def __post_init__(self) -> None:
        check_int("DemoOptions", "patients", self.patients, ge=2)
        check_int("DemoOptions", "steps", self.steps, ge=1)
        check_number("DemoOptions", "epsilon", self.epsilon, gt=0.0)
        check_number("DemoOptions", "delta", self.delta, gt=0.0, lt=1.0)
        check_int("DemoOptions", "iterations", self.iterations, ge=1, allow_none=True)
        check_int("DemoOptions", "public_trajectories", self.public_trajectories, ge=0)


@dataclass(frozen=True)
class DemoReport:
    """Everything the demo summary prints."""

    dataset: str
    lake: str
    tracking_uri: str
    tables: dict[str, str]
    ingest: dict[str, Any]
    evaluation: dict[str, Any]
    ground_truth: dict[str, float]
    non_private_lstd: dict[str, float]
    seconds: dict[str, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Plain form for ``--json``."""
        return dict(self.__dict__, notes=list(self.notes))

    def summary(self) -> str:
        """The printed summary."""
        ev = self.evaluation
        lines = [
            "",
            "gpope demo: simulated HIV cohort -> Spark -> Delta -> private evaluation -> MLflow",
            f"dataset {self.dataset} (lake {self.lake})",
            "",
            "tables written (Delta):",
        ]
        lines += [f"  {name:<24} {where}" for name, where in self.tables.items()]
        lines.append(f"  {'MLflow':<24} {self.tracking_uri} (run {ev.get('mlflow_run_id')})")
        lines.append("")
        lines.append("ingest rows (in = used + rejected):")
        for table, n_in in self.ingest["rows_in"].items():
            rejected = sum(self.ingest["rejected"].get(table, {}).values())
            lines.append(
                f"  {table:<13} in {n_in:>8}  used {self.ingest['rows_used'][table]:>8}  "
                f"rejected {rejected:>6}"
            )
        lines.append(
            f"  -> {self.ingest['n_trajectories']} trajectories, {self.ingest['n_transitions']} transitions"
        )
        lines += [
            "",
            f"privacy: epsilon {ev['epsilon']:g}, delta {ev['delta']:g} spent "
            f"(accountant {ev['accountant']}, sigma {ev['sigma']:.4g}, m {ev['m']}, "
            f"N {ev['iterations']}, sampling {ev['sampling']}; "
            f"{'private: OS-entropy noise' if ev['private'] else 'NOT private: fixed seed'})",
            f"         remaining budget of {self.dataset}: epsilon {ev['remaining_epsilon']:.6g}, "
            f"delta {ev['remaining_delta']:.3g} (basic composition)",
            "",
            "value estimates at the reference states (gamma 0.98):",
            f"  {'state':<20} {'GPOPE (released)':>18} {'Monte Carlo truth':>18} "
            f"{'LSTD [non-private diagnostic]':>30}",
        ]
        for name, value in ev["reference_values"].items():
            lines.append(
                f"  {name:<20} {value:>18.4g} {self.ground_truth.get(name, float('nan')):>18.4g} "
                f"{self.non_private_lstd.get(name, float('nan')):>30.4g}"
            )
        if ev.get("public_mspbe") is not None:
            lines.append(f"  MSPBE of the released theta on a public simulated cohort: {ev['public_mspbe']:.4g}")
        lines.append("")
        lines.append("stage times: " + ", ".join(f"{k} {v:.1f} s" for k, v in self.seconds.items()))
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def _stage(name: str, progress: bool) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=1, desc=name, unit="stage", disable=not progress, leave=True)


def run_demo(
    spark: SparkSession,
    config: GpopeConfig,
    *,
    options: DemoOptions,
    tracking_uri: str | None = None,
) -> DemoReport:
    """Run the whole demo and return its report (the CLI prints ``report.summary()``)."""
    from gpope.shell import lake
    from gpope.shell.pipeline.evaluate import EvaluateOptions, run_evaluate
    from gpope.shell.pipeline.ingest import run_ingest
    from gpope.shell.pipeline.simulate import (
        SimulateOptions,
        dataset_settings_for_domain,
        run_simulate,
    )
    from gpope.shell.pipeline.stats import run_stats
    from gpope.shell.tracking import resolve_tracking_uri

    spec = demo_spec()
    dataset = options.dataset or (
        f"hiv_demo_{datetime.now(UTC):%Y%m%d_%H%M%S}_{secrets.token_hex(2)}"
    )
    seconds: dict[str, float] = {}

    def timed(name: str, fn: Any) -> Any:
        start = time.perf_counter()
        with _stage(name, options.progress) as bar:
            out = fn()
            bar.update(1)
        seconds[name] = time.perf_counter() - start
        return out

    timed("simulate", lambda: run_simulate(
        spark, config, dataset, domain="hiv", patients=options.patients, seed=options.seed,
        options=SimulateOptions(n_steps=options.steps, batch_size=500), progress=options.progress,
    ))
    settings = dataset_settings_for_domain("hiv", max_length=options.steps)
    ingest = timed("ingest", lambda: run_ingest(spark, config, dataset, settings=settings))
    timed("stats", lambda: run_stats(spark, config, dataset=dataset, spec=spec))
    eval_options = EvaluateOptions.from_settings(
        config.evaluation, epsilon=options.epsilon, delta=options.delta,
        iterations=options.iterations, private_diagnostics=True,
        public_trajectories=options.public_trajectories, public_max_length=options.steps,
    )
    evaluation = timed("evaluate", lambda: run_evaluate(
        spark, config, dataset=dataset, spec=spec, options=eval_options,
        tracking_uri=tracking_uri, spec_text=DEMO_SPEC_YAML,
    ))
    truth = timed("ground truth", lambda: _ground_truth(spec))
    tables = {
        f"bronze {t}": lake.table_location(config.lake, "bronze", dataset, t)
        for t in ("observations", "treatments", "outcomes")
    }
    tables.update({
        f"silver {t}": lake.table_location(config.lake, "silver", dataset, t)
        for t in ("transitions", "rejected_events")
    })
    tables.update({f"gold {k}": v for k, v in evaluation.tables.items()})
    notes = (
        f"horizon: {options.steps} of the 200 HIV decisions recorded per patient (simulation cost); "
        "Monte Carlo truth is the 200-decision discounted value of the greedy target policy from "
        "each reference state (deterministic: one exact rollout).",
        f"a fresh dataset name per demo run ({dataset}): each run simulates a new cohort with its "
        "own privacy budget, so repeated runs never exhaust a budget.",
        "the LSTD column is computed WITHOUT noise from the private statistics: a non-private "
        "diagnostic for comparison, logged to MLflow tagged diagnostic.private=true, never released.",
    )
    return DemoReport(
        dataset=dataset,
        lake=str(config.lake.root),
        tracking_uri=resolve_tracking_uri(tracking_uri, config.tracking.uri, config.lake.root),
        tables=tables,
        ingest=ingest.to_dict(),
        evaluation=evaluation.to_dict(),
        ground_truth=truth,
        non_private_lstd=dict(evaluation.private_diagnostics.get("lstd_values", {})),
        seconds=seconds,
        notes=notes,
    )


def _ground_truth(spec: EvaluationSpec) -> dict[str, float]:
    """Monte Carlo values of the target policy at the spec's reference states (public simulator)."""
    from gpope.core.envs import train_hiv

    values, _ = train_hiv.monte_carlo_values(
        spec.target_policy, spec.reference_array(), np.random.default_rng(0), n_rollouts=1,
        gamma=spec.gamma,
    )
    return {k: float(v) for k, v in zip(spec.reference_names, values, strict=True)}
