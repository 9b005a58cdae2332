"""The main job (``gpope demo``): a simulated HIV cohort through the whole private pipeline.

simulate -> ingest -> stats -> evaluate at epsilon = 1, delta = 1e-5 -> Monte Carlo ground truth
at the reference states from the public simulator. A non-private reference (the LSTD fixed point
of the private statistics) is logged only as a tagged private diagnostic.

* **Horizon.** The demo records the first ``steps`` (default 40) decisions of each patient (a
  public ``max_length``); the spec's discount 0.9 keeps the value within what they can show.
* **Truth.** The discounted value of the target policy from the public simulator: one exact
  200-decision rollout from each public reference state (gamma^200 < 1e-9).
* **Settings** come from the ``evaluation:`` block of ``conf/specs/hiv_demo.yaml``, tuned by
  ``gpope tune`` on a separate PUBLIC cohort, never on the demo's data.
* **Repeated runs** simulate a NEW cohort into a new dataset ``hiv_demo_<UTC time>_<random>``
  with its own budget, unless ``--dataset`` names one.
"""

from __future__ import annotations

import math
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

__all__ = ["DEMO_SPEC_PATH", "DemoOptions", "DemoReport", "check_demo", "demo_spec", "run_demo"]

#: The demo's evaluation spec (with its publicly tuned ``evaluation:`` block), looked up in the
#: working directory, then the bundle / repository root (:func:`~gpope.shell.pipeline.jobargs.resolve_path`).
DEMO_SPEC_PATH = "conf/specs/hiv_demo.yaml"


def demo_spec(path: str = DEMO_SPEC_PATH) -> EvaluationSpec:
    """The demo spec (conf/specs/hiv_demo.yaml unless ``path`` says otherwise)."""
    from gpope.shell.pipeline.jobargs import load_spec

    return load_spec(path)


@dataclass(frozen=True)
class DemoOptions:
    """Size and privacy of the demo (all public). ``steps``: decisions recorded per patient
    (the public max_length); ``dataset`` None: a fresh name per run; ``seed`` seeds the
    simulation only (the evaluation always uses OS entropy); ``iterations`` None: the spec's;
    ``public_trajectories``: the public cohort for MSPBE; ``allow_invalid_accounting`` accepts a
    configured ``paper`` accountant (NOT private)."""

    patients: int = 2000
    steps: int = 40
    epsilon: float = 1.0
    delta: float = 1e-5
    dataset: str | None = None
    seed: int | None = None
    iterations: int | None = None
    public_trajectories: int = 100  # = public.PUBLIC_TRAJECTORIES: the cohort of `gpope evaluate`
    progress: bool = True
    spec: str = DEMO_SPEC_PATH
    allow_invalid_accounting: bool = False

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
    policy_truth: dict[str, float] = field(default_factory=dict)
    gamma: float = 0.9
    public_relative_mspbe: float | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__, notes=list(self.notes))

    def summary(self) -> str:
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
        from gpope.shell.operator import HEADING, OPERATOR_ONLY

        counts = self.ingest[OPERATOR_ONLY]
        lines.append(f"ingest rows (in = used + rejected), {HEADING}")
        for table, n_in in counts["rows_in"].items():
            rejected = sum(counts["rejected"].get(table, {}).values())
            lines.append(
                f"  {table:<13} in {n_in:>8}  used {counts['rows_used'][table]:>8}  "
                f"rejected {rejected:>6}"
            )
        lines.append(
            f"  -> {counts['n_trajectories']} trajectories (the exact m), "
            f"{counts['n_transitions']} transitions"
        )
        lines += [
            "",
            f"privacy: epsilon {ev['epsilon']:g}, delta {ev['delta']:g} spent "
            f"(accountant {ev['accountant']}, sigma {ev['sigma']:.4g}, "
            + (f"m~ {ev['m']} (released count), " if ev.get("relation") == "add_or_remove_one"
               else f"m {ev['m']}, ")
            + f"N {ev['iterations']}, sampling {ev['sampling']}; "
            f"{'private: OS-entropy noise' if ev['private'] else ev.get('label', 'NOT private')})",
            f"         {self.dataset}: "
            + (ev.get("remaining_line") or f"remaining budget: epsilon "
               f"{ev['remaining_epsilon']:.6g}, delta {ev['remaining_delta']:.3g}"),
            "",
            f"value estimates at the reference states (gamma {self.gamma:g}):",
            f"  {'state':<20} {'GPOPE (released)':>18} {'interval':>24} {'at least':>10} "
            f"{'Monte Carlo truth':>18} {'LSTD [non-private diagnostic]':>30}",
        ]
        lines += [f"  {w}" for w in ev.get("warnings") or []]
        iv = ev.get("intervals")
        from gpope.shell.pipeline.interval_notes import format_span, unbounded_note

        for i, (name, value) in enumerate(ev["reference_values"].items()):
            span = format_span(iv["lower"][i], iv["upper"][i]) if iv else "-"
            low = f"{iv['lower_bound'][i]:.4g}" if iv and math.isfinite(iv["lower_bound"][i]) else "-"
            lines.append(
                f"  {name:<20} {value:>18.4g} {span:>24} {low:>10} "
                f"{self.ground_truth.get(name, float('nan')):>18.4g} "
                f"{self.non_private_lstd.get(name, float('nan')):>30.4g}"
            )
        if iv:
            lines.append(f"  intervals: {100 * iv['level']:g}% two-sided and one-sided lower bound, "
                         "covering privacy noise and sampling variability (parametric bootstrap "
                         "over the run's noisy-statistics releases)")
            note = unbounded_note(iv)
            if note:
                lines.append(f"  {note}")
        lines += _policy_value_lines(ev.get("policy_value"), self.policy_truth, self.gamma)
        if ev.get("private_relative_mspbe") is not None:
            lines.append(f"  private relative MSPBE (noisy statistics, post-processing): "
                         f"{ev['private_relative_mspbe']:.3g}")
        if ev.get("public_mspbe") is not None:
            rel = self.public_relative_mspbe
            lines.append(
                f"  MSPBE of the released theta on a public simulated cohort: {ev['public_mspbe']:.4g}"
                + (f" (relative to theta = 0: {rel:.3g})" if rel is not None else "")
            )
        lines.append("")
        lines.append("stage times: " + ", ".join(f"{k} {v:.1f} s" for k, v in self.seconds.items()))
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def _stage(name: str, progress: bool) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=1, desc=name, unit="stage", disable=not progress, leave=True)


def check_demo(config: GpopeConfig, options: DemoOptions) -> tuple[EvaluationSpec, Any]:
    """The demo's spec and evaluation settings, checked (no Spark needed).

    Raises:
        ConfigError: an invalid setting or combination (e.g. the ``paper`` accountant from the
            configuration without ``allow_invalid_accounting``).
    """
    from gpope.core.evaluation.settings import SettingsLayer
    from gpope.shell.evaluate.inputs import check_request

    layer = SettingsLayer.of(
        iterations=options.iterations, epsilon=options.epsilon, delta=options.delta,
        private_diagnostics=True, public_trajectories=options.public_trajectories,
        allow_invalid_accounting=options.allow_invalid_accounting or None)
    spec = demo_spec(options.spec)
    check_request(config, spec, layer)
    return spec, layer


def run_demo(
    spark: SparkSession,
    config: GpopeConfig,
    *,
    options: DemoOptions,
    tracking_uri: str | None = None,
) -> DemoReport:
    """Run the whole demo and return its report (the CLI prints ``report.summary()``)."""
    from gpope.shell import lake
    from gpope.shell.evaluate.run import run_evaluate
    from gpope.shell.pipeline.ingest import run_ingest
    from gpope.shell.pipeline.simulate import (
        SimulateOptions,
        dataset_settings_for_domain,
        run_simulate,
    )
    from gpope.shell.pipeline.stats import run_stats
    from gpope.shell.tracking import resolve_tracking_uri

    spec, eval_options = check_demo(config, options)  # before anything is simulated or written
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
    truth = timed("ground truth", lambda: _ground_truth(spec))
    policy_truth = timed("policy truth", lambda: _policy_truth(spec, options.steps))
    evaluation = timed("evaluate", lambda: run_evaluate(
        spark, config, dataset=dataset, spec=spec, options=eval_options,
        tracking_uri=tracking_uri, spec_text=_spec_text(options.spec), truth=truth,
    ))
    relative = evaluation.public_relative_mspbe
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
        f"gamma {spec.gamma:g} (effective horizon {1.0 / (1.0 - spec.gamma):.0f} decisions) keeps the "
        "estimated value within what the recorded decisions show.",
        "Monte Carlo truth: the discounted value of the greedy target policy that the estimator "
        f"targets (it bootstraps at the last recorded decision), one exact {_TRUTH_STEPS}-decision "
        f"rollout of the deterministic simulator from each reference state (gamma^{_TRUTH_STEPS} "
        f"= {spec.gamma ** _TRUTH_STEPS:.0e}: the same as the infinite sum). Reference states are "
        "public, from the simulator, inside the data's state distribution: every patient's start "
        "state and the state after 20 target-policy decisions (100 days) from it.",
        "evaluation settings (clip, step size, batch rate, iterations, averaging) were chosen on a "
        "separate PUBLIC simulated cohort (the spec's evaluation: block, written by `gpope tune "
        "--spec`; seed, size and grid recorded there), never on "
        "this cohort; the relative MSPBE divides by MSPBE(theta = 0) on the public MSPBE cohort.",
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
        policy_truth=policy_truth,
        non_private_lstd=dict(evaluation.private_diagnostics.get("lstd_values", {})),
        gamma=float(spec.gamma),
        public_relative_mspbe=relative,
        seconds=seconds,
        notes=notes,
    )


#: Decisions of each ground-truth rollout (the HIV episode length; gamma^200 < 1e-9 at 0.9).
_TRUTH_STEPS = 200


def _ground_truth(spec: EvaluationSpec) -> dict[str, float]:
    """Monte Carlo values of the target policy at the spec's reference states (public simulator)."""
    from gpope.core.envs import train_hiv

    values, _ = train_hiv.monte_carlo_values(
        spec.target_policy, spec.reference_array(), np.random.default_rng(0), n_rollouts=1,
        gamma=spec.gamma, n_steps=_TRUTH_STEPS,
    )
    return {k: float(v) for k, v in zip(spec.reference_names, values, strict=True)}


#: Behaviour patients of the Monte Carlo truth of J(behaviour) (its standard error is printed).
_BEHAVIOUR_TRUTH_PATIENTS = 500


def _policy_truth(spec: EvaluationSpec, steps: int) -> dict[str, float]:
    """The simulator's J(target), J(behaviour) and contrast over the recorded ``steps``
    decisions from the common start state: the target's one exact rollout (deterministic) and
    a Monte Carlo mean of behaviour patients (with its standard error)."""
    from gpope.core.envs import hiv, train_hiv

    start = hiv.to_observation(np.asarray(hiv.START, dtype=np.float64))[None, :]
    jt, _ = train_hiv.monte_carlo_values(spec.target_policy, start, np.random.default_rng(0),
                                         n_rollouts=1, gamma=spec.gamma, n_steps=steps)
    jb, se = train_hiv.monte_carlo_values(train_hiv.behavior_policy(), start,
                                          np.random.default_rng(1),
                                          n_rollouts=_BEHAVIOUR_TRUTH_PATIENTS, gamma=spec.gamma,
                                          n_steps=steps)
    return {"policy_value": float(jt[0]), "behaviour_value": float(jb[0]),
            "policy_contrast": float(jt[0] - jb[0]), "behaviour_value_se": float(se[0])}


def _policy_value_lines(released: dict[str, Any] | None, truth: dict[str, float],
                        gamma: float) -> list[str]:
    """The demo's table of the three released scalars beside the simulator's truth."""
    if not released:
        return []
    names = {"policy_value": "J(target)", "behaviour_value": "J(behaviour)",
             "policy_contrast": "J(target) - J(behaviour)"}
    level = next(iter(released.values()))["ci_level"]
    lines = ["", f"policy value over the patients' start states (gamma {gamma:g}, the recorded "
             "decisions):",
             f"  {'quantity':<26} {'released':>12} {f'{100 * level:g}% interval':>26} "
             f"{'at least':>12} {'simulator truth':>16}"]
    for key, label in names.items():
        v = released[key]
        span = f"[{v['lower']:.4g}, {v['upper']:.4g}]"
        lines.append(f"  {label:<26} {v['value']:>12.4g} {span:>26} {v['lower_bound']:>12.4g} "
                     f"{truth.get(key, float('nan')):>16.4g}")
    if "behaviour_value_se" in truth:
        lines.append(f"  truth: the target's exact rollout; J(behaviour) by Monte Carlo over "
                     f"{_BEHAVIOUR_TRUTH_PATIENTS} simulated patients (standard error "
                     f"{truth['behaviour_value_se']:.3g}). Intervals: one release at the run's "
                     "policy value share, clipped importance weights with their bias inside the "
                     "interval (docs/RESULTS.md)")
    from gpope.shell.evaluate.policy_value import observed_weight_note

    note = observed_weight_note(released["policy_value"].get("observed_weight"))
    return lines + ([f"  {note}"] if note else [])


def _spec_text(path: str) -> str:
    from gpope.shell.pipeline.jobargs import resolve_path

    return resolve_path(path).read_text()

