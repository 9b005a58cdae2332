"""The plan's ``policy_value`` component (:data:`POLICY_VALUE`): reads each trajectory's
``trajectory_stats.policy_terms`` (g, a, n) from the pinned statistics, releases them once at the
component's noise multiplier (:func:`gpope.core.policy_value_release.release_policy_value`) and
writes the three scalars' ``released_values`` rows in the run's atomic step."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from gpope.core.estimators.execution import Estimate, ReleaseExecution, RunSource
from gpope.errors import DataError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from gpope.core.evaluation import ReleasePlan
    from gpope.core.evaluation.components import ReleaseComponent
    from gpope.core.evaluation.settings import RunSettings
    from gpope.core.policy_value import PolicyValueTerms
    from gpope.core.policy_value_direct import FirstStateRelease
    from gpope.core.policy_value_release import PolicyValueInterval
    from gpope.core.untuned.release import UntunedRelease

    #: The per-patient policy value terms (private) and the first states' features or None.
    PolicyTerms = tuple[PolicyValueTerms, np.ndarray | None]
    from gpope.core.policy_value_settings import PolicyValueSettings
    from gpope.core.spec import EvaluationSpec

__all__ = ["ESTIMATOR", "POLICY_VALUE", "as_report", "count_allowance", "estimand_of",
           "functionals_of", "mlflow_metrics", "observed_weight_note", "plot_policy_values",
           "policy_value_rows", "read_policy_terms", "release_first_state_of",
           "release_policy_values", "summary_lines"]

#: The ``estimator`` of the scalar rows in released_values, whichever estimand a row has, so
#: ``latest_release`` keeps one row per quantity.
ESTIMATOR = "clipped_is"


def _noise_generator(seed: int | None) -> np.random.Generator:
    """OS entropy, or a stream derived from ``seed`` (NOT private) independent of the others."""
    ss = np.random.SeedSequence() if seed is None else np.random.SeedSequence([int(seed), 0x5056])
    return np.random.default_rng(ss)


def read_policy_terms(stats_df: DataFrame, spec: EvaluationSpec, *,
                      rows: int | None = None) -> PolicyTerms:
    """(the per-patient terms (private), the first states' features (rows, n) or None) of the
    run's pinned statistics; ``rows``: the number of trajectories they must number."""
    from gpope.core.policy_value import PolicyValueTerms
    from gpope.core.state_action import value_spec

    n = value_spec(spec).n_features  # first-state features of the value map
    table = stats_df.select("policy_terms").toArrow()
    col = table.column("policy_terms").combine_chunks()
    if col.null_count:
        raise DataError(
            f"{col.null_count} trajectories of the statistics have no policy terms although spec "
            f"{spec.name!r} sets the public bounds; re-run `gpope stats` for this spec.")
    flat = np.asarray(col.flatten().to_numpy(zero_copy_only=False), dtype=np.float64)
    width = 3 + n if len(flat) == len(col) * (3 + n) else 3
    x = flat.reshape(-1, width)
    if rows is not None and len(x) != rows:
        raise DataError(f"The statistics hold {len(x)} policy terms for {rows} patients; re-run "
                        "`gpope stats` for this spec.")
    terms = PolicyValueTerms(g=x[:, 0].copy(), a=x[:, 1].copy(), n=x[:, 2].copy())
    return terms, (x[:, 3:].copy() if width > 3 else None)


def count_allowance(plan: ReleasePlan, settings: PolicyValueSettings, level: float
                    ) -> tuple[int | None, int, float]:
    """(the released count the rows divide by or None, its margin t, the level the rows are
    built at) for rows reported at ``level``: where m is the released count m~, ``count_alpha``
    of alpha goes to |m~ - m| <= t, so by a union bound the rows still miss with probability at
    most 1 - ``level``."""
    from gpope.core.mechanisms.count import count_margin

    if plan.count_sigma <= 0:
        return None, 0, level
    beta = (1.0 - level) * settings.count_alpha
    return plan.m, count_margin(plan.count_sigma, beta), level + beta


def release_first_state_of(read: PolicyTerms, spec: EvaluationSpec,
                           plan: ReleasePlan, component: ReleaseComponent, *,
                           settings: PolicyValueSettings, seed: int | None, level: float
                           ) -> FirstStateRelease | None:
    """The direct method's first-state release at ``first_state_share`` of ``component``'s
    privacy loss, or None when the statistics carry no first-state features."""
    from gpope.core.policy_value_direct import one_hot_map, release_first_state, split_first_state
    from gpope.core.state_action import value_spec
    from gpope.core.untuned.release import feature_norm_bound

    if read[1] is None:
        return None
    _, s_fs = split_first_state(component.sigma, settings.first_state_share)
    ss = np.random.SeedSequence() if seed is None else np.random.SeedSequence([int(seed), 0x46535452])
    fmap = value_spec(spec).feature_map
    count, margin, _ = count_allowance(plan, settings, level)
    return release_first_state(read[1], norm_bound=feature_norm_bound(fmap), sigma=s_fs,
                               rng=np.random.default_rng(ss), one_hot=one_hot_map(fmap),
                               count=count, count_margin=margin)


def functionals_of(first: FirstStateRelease | None, settings: PolicyValueSettings, level: float, *,
                   plan: ReleasePlan) -> tuple[np.ndarray, np.ndarray] | None:
    """The public rows and levels a run asks its estimator for (the first-state mean), or None
    without a first-state release."""
    from gpope.core.policy_value_direct import direct_levels

    if first is None:
        return None
    inner = count_allowance(plan, settings, level)[2]
    return np.stack([first.mean] * 2), direct_levels(inner, settings.first_state_alpha)


def release_policy_values(read: PolicyTerms, spec: EvaluationSpec,
                          plan: ReleasePlan, component: ReleaseComponent, *,
                          settings: PolicyValueSettings, level: float, seed: int | None,
                          secure_noise: bool = False,
                          direct: tuple[UntunedRelease, FirstStateRelease] | None = None
                          ) -> dict[str, PolicyValueInterval]:
    """The released scalars ``{name: PolicyValueInterval}`` of ``component`` from the terms
    ``read``; nothing but the release leaves this function. ``direct``: (the estimator's release,
    the first-state release): J(target) and the contrast are then picked by
    :func:`gpope.core.policy_value_direct.pick_policy_values`. A state-action ``spec`` (no
    logged propensities) takes the direct method's rows or, where that is unidentified or
    absent, the public range."""
    from gpope.core.features import TabularFeatures
    from gpope.core.policy_value import spec_bounds
    from gpope.core.policy_value_direct import (
        pick_policy_values,
        public_range_rows,
        split_first_state,
    )
    from gpope.core.policy_value_release import public_ranges, release_policy_value
    from gpope.core.state_action import is_state_action
    from gpope.core.untuned.release import value_range

    sigma = component.sigma if direct is None else split_first_state(
        component.sigma, settings.first_state_share)[0]
    count, margin, inner = count_allowance(plan, settings, level)
    rel = release_policy_value(read[0], spec_bounds(spec), sigma=sigma,
                               settings=settings, rng=_noise_generator(seed),
                               secure_noise=secure_noise, count=count, count_margin=margin)
    logged = not is_state_action(spec)
    if direct is None:
        out = rel.intervals_with(inner, settings)
        out = out if logged else public_range_rows(out, public_ranges(rel.bounds), inner)
        return {k: dataclasses.replace(v, level=float(level)) for k, v in out.items()}
    est, first = direct
    vr = value_range(spec)
    fiv = est.functionals
    out = pick_policy_values(
        rel, settings, level=inner, theta=est.theta, first=first,
        functional_ends=np.stack([fiv.lower, fiv.upper], axis=1), supported=est.supported,
        functional_se=fiv.se,
        unsupported_bound=(max(abs(vr[0]), abs(vr[1]))
                           if isinstance(getattr(spec.feature_map, "base", spec.feature_map),
                                         TabularFeatures) else None),
        ratios_logged=logged)
    return {k: dataclasses.replace(v, level=float(level)) for k, v in out.items()}


class _PolicyValue(ReleaseExecution):
    """The ``policy_value`` component: its terms (and the direct method's first-state release)
    before the estimator's release, the three scalars after it."""

    def check(self, component: ReleaseComponent, rows: DataFrame) -> None:
        if "policy_terms" not in rows.columns:
            raise DataError(
                "The dataset's trajectory_stats were computed before the policy value release "
                "existed (no policy_terms column); re-run `gpope stats` for this spec, or pass "
                "--policy-value-share 0 to evaluate without the policy value.")

    def prepare(self, component: ReleaseComponent, run: RunSource, *, plan: ReleasePlan,
                settings: RunSettings, spec: EvaluationSpec) -> RunSource:
        from gpope.core.estimators import get

        read = read_policy_terms(run.base.rows, spec, rows=run.base.m)
        if not get(plan.estimator).direct_method:
            return dataclasses.replace(run, policy_terms=read)
        # released first, so the estimator's release gives the interval of mu^ . theta*
        pv, level = settings.policy_value_settings(), settings.ci_level
        first = release_first_state_of(read, spec, plan, component, settings=pv,
                                       seed=settings.seed, level=level)
        return dataclasses.replace(run, policy_terms=read, first_state=first,
                                   functionals=functionals_of(first, pv, level, plan=plan))

    def finish(self, component: ReleaseComponent, run: RunSource, est: Estimate, *,
               plan: ReleasePlan, settings: RunSettings, spec: EvaluationSpec) -> Estimate:
        direct = None if run.first_state is None else (est.release, run.first_state)
        return dataclasses.replace(est, policy_values=release_policy_values(
            run.policy_terms, spec, plan, component, level=settings.ci_level,
            seed=settings.seed, settings=settings.policy_value_settings(),
            secure_noise=settings.secure_noise, direct=direct))

    def rows(self, component: ReleaseComponent, row: dict[str, Any], est: Estimate, *,
             spec_name: str) -> list[dict[str, Any]]:
        return policy_value_rows(row, spec_name=spec_name, released=est.policy_values)


POLICY_VALUE = _PolicyValue()


def estimand_of(name: str, iv: PolicyValueInterval) -> str:
    """What released scalar ``name`` estimates: the estimand the run picked, else the default
    one (:data:`gpope.core.policy_value_direct.ESTIMANDS`)."""
    from gpope.core.policy_value_direct import ESTIMANDS

    default = {"policy_value": "identified_set", "behaviour_value": "behaviour",
               "policy_contrast": "identified_set_contrast"}
    return iv.estimand or ESTIMANDS[default[name]]


def policy_value_rows(row: dict[str, Any], *, spec_name: str,
                      released: dict[str, PolicyValueInterval] | None) -> list[dict[str, Any]]:
    """The released_values rows of the three scalars (none when ``released`` is None)."""
    out = []
    for state, iv in (released or {}).items():
        out.append({
            "run_id": row["run_id"], "dataset": row["dataset"], "spec_id": row["spec_id"],
            "spec_name": spec_name, "estimator": ESTIMATOR, "state": state,
            "value": float(iv.value), "lower": float(iv.lower), "upper": float(iv.upper),
            "lower_bound": float(iv.lower_bound), "ci_level": float(iv.level),
            "epsilon": row["epsilon"], "delta": row["delta"], "accountant": row["accountant"],
            "private": row["private"], "created_at": row["created_at"],
            "estimand": estimand_of(state, iv),
        })
    return out


def as_report(released: dict[str, PolicyValueInterval] | None) -> dict[str, dict[str, float]] | None:
    """Plain form for the run's report and ``--json``."""
    if released is None:
        return None
    out = {k: {"value": v.value, "lower": v.lower, "upper": v.upper,
               "lower_bound": v.lower_bound, "ci_level": v.level} for k, v in released.items()}
    for k, v in released.items():
        if v.observed_weight is not None:
            out[k]["observed_weight"] = v.observed_weight
        out[k]["estimand"] = estimand_of(k, v)
    return out


def mlflow_metrics(released: dict[str, PolicyValueInterval] | None) -> dict[str, float]:
    """MLflow metrics ``<name>``, ``<name>_lower``, ``<name>_upper``, ``<name>_lower_bound``
    (all finite by construction)."""
    out: dict[str, float] = {}
    for name, iv in (released or {}).items():
        out.update({name: float(iv.value), f"{name}_lower": float(iv.lower),
                    f"{name}_upper": float(iv.upper), f"{name}_lower_bound": float(iv.lower_bound)})
    return out


def released_from_metrics(metrics: Mapping[str, float]) -> dict[str, tuple[float, float, float]]:
    """``{name: (value, lower, upper)}`` of the scalars found in a run's metrics."""
    from gpope.core.policy_value import QUANTITIES

    return {q: (float(metrics[q]), float(metrics[f"{q}_lower"]), float(metrics[f"{q}_upper"]))
            for q in QUANTITIES if q in metrics and f"{q}_lower" in metrics}


def plot_policy_values(ax: Any, scalars: dict[str, tuple[float, float, float]], *,
                       epsilon: float) -> None:
    """The three released scalars with their intervals on one matplotlib axis."""
    labels = {"policy_value": "J(target)", "behaviour_value": "J(behaviour)",
              "policy_contrast": "contrast"}
    names = list(scalars)
    x = np.arange(len(names), dtype=float)
    v = np.array([scalars[n][0] for n in names])
    lo = np.array([scalars[n][1] for n in names])
    hi = np.array([scalars[n][2] for n in names])
    ax.errorbar(x, v, yerr=[v - lo, hi - v], fmt="s", capsize=6, color="C1",
                label=f"released (eps={epsilon:g}), interval")
    ax.axhline(0.0, color="0.7", lw=0.8)
    ax.set_xticks(x, [labels.get(n, n) for n in names])
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.set_ylabel("discounted return, raw reward unit")
    ax.set_title("policy value over the data's start states", fontsize=9)
    ax.legend(fontsize=8, loc="best")


def summary_lines(policy_value: dict[str, dict[str, float]] | None) -> list[str]:
    """The CLI summary's lines for the three scalars."""
    if not policy_value:
        return []
    names = {"policy_value": "J(target)", "behaviour_value": "J(behaviour)",
             "policy_contrast": "J(target) - J(behaviour)"}
    out = []
    for key, label in names.items():
        v = policy_value.get(key)
        if v is not None:
            out.append(f"  {label} = {v['value']:.6g}   {100 * v['ci_level']:g}% interval "
                       f"[{v['lower']:.4g}, {v['upper']:.4g}], at least {v['lower_bound']:.4g}")
            if v.get("estimand"):
                out.append(f"    estimates: {v['estimand']}")
    note = observed_weight_note(policy_value.get("policy_value", {}).get("observed_weight"))
    return out + ([f"  {note}"] if note else [])


def observed_weight_note(observed: float | None) -> str | None:
    """How little of J(target) the data identify, when the released weight share is below one
    half; None otherwise."""
    if observed is None or observed >= 0.5:
        return None
    return (f"J(target): the recorded decisions carry only {100 * observed:.0f}% of the target's "
            "discounted weight (after clipping); the rest is bounded only by the spec's public "
            "reward range, so its interval is wide. Data whose treatments follow the target for "
            "longer narrow it, as does a larger valid importance_weight_bound (it also clips "
            "the cumulative weight); a tighter valid public reward bound narrows it in "
            "proportion (docs/OWN_DATA.md, 'Reading the output').")
