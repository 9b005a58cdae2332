"""The tuning-free default of ``gpope evaluate`` in the pipeline: when it applies, and its release
as Spark aggregates over ``trajectory_stats``.

A spec without an ``evaluation:`` block has nothing publicly tuned; unless the command line (or
the caller) chose the estimator or a solver setting, the run releases
:mod:`gpope.core.untuned.release`'s default instead of generic GPOPE settings
(:mod:`gpope.core.estimators.untuned` claims the run). Its four releases read the
statistics only through sums over all rows: each is one distributed aggregate
(:func:`gpope.shell.pipeline.ssp` machinery, partial sums per partition, only those reach the
driver), so it runs at any m, in the same arithmetic as the core's in-memory reference.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from gpope.core.spec import EvaluationSpec
    from gpope.core.untuned.release import UntunedRelease, UntunedSettings

__all__ = ["execute_untuned", "run_untuned", "untuned_result"]


def execute_untuned(source: Any, *, plan: Any, settings: Any, spec: EvaluationSpec) -> Any:
    """The tuning-free default's execution (:mod:`gpope.core.estimators.untuned`): values
    clamped into the spec's public range, each with its interval, and the policy value release
    with the direct method's J(target) from the same release."""
    from gpope.core.estimators import Estimate
    from gpope.core.ssp import private_mspbe
    from gpope.shell.pipeline import evaluate_policy_value as pv

    # the direct method's J(target): the first states' feature mean, released before theta so
    # that the default's release gives the interval of mu^ . theta* with its V lines
    pv_settings = settings.policy_value_settings()
    read = pv.read_policy_terms(source.rows, spec, plan)
    first = pv.release_first_state_of(read, spec, plan, settings=pv_settings, seed=settings.seed)
    rel = run_untuned(source.aggregate, spec, m=plan.m, plan=plan,
                      moments_share=settings.moments_share, seed=settings.seed,
                      level=settings.ci_level, identification=settings.ssp_identification,
                      settings=settings.untuned, behaviour=settings.behaviour,
                      functionals=pv.functionals_of(first, pv_settings, settings.ci_level))
    result = untuned_result(rel, plan=plan, delta=settings.delta, seed=settings.seed)
    return Estimate(result=result, theta=rel.theta, values=rel.interval.value,
                    intervals=rel.interval, private_mspbe=private_mspbe(rel.theta, rel.noisy),
                    noisy=rel.noisy, policy_values=pv.release_policy_values(
                        source.rows, spec, plan, level=settings.ci_level, seed=settings.seed,
                        settings=pv_settings, secure_noise=settings.secure_noise, read=read,
                        direct=None if first is None else (rel, first)),
                    settings=settings,
                    private_population=source.population() if settings.private_diagnostics
                    else None)


def run_untuned(aggregate: Any, spec: EvaluationSpec, *, m: int, plan: Any, moments_share: float,
                seed: int | None, level: float, identification: bool,
                settings: UntunedSettings | None = None,
                functionals: tuple[np.ndarray, np.ndarray] | None = None,
                behaviour: Any = None) -> UntunedRelease:
    """The default's releases through ``aggregate`` (the plan's ``untuned`` component;
    :meth:`gpope.core.estimators.StatisticsSource.aggregate` over one pinned version, which
    checks that it summed exactly m rows). Noise from OS entropy unless ``seed`` (NOT private).
    ``functionals``: public rows and levels whose intervals the release also gives (the
    direct method's first-state mean, :func:`gpope.core.untuned.release.release_untuned`).
    ``behaviour``: the rules the plan's ``behaviour`` component was planned with (the run's
    ``evaluation.behaviour``; the defaults when None)."""
    from gpope.core.untuned.release import UntunedSettings, release_untuned

    settings = settings or UntunedSettings()
    sigmas = plan.untuned_sigmas  # the estimator's share of the run (the plan's numbers)

    ss = np.random.SeedSequence() if seed is None else np.random.SeedSequence([int(seed), 0x554E54])
    rng = np.random.default_rng(ss)
    if plan.component("behaviour") is not None:  # no propensities: estimate them first
        from gpope.core.behaviour_estimate import BehaviourSettings

        aggregate, spec = _with_estimated_behaviour(aggregate, spec, m=m, plan=plan, rng=rng,
                                                    rules=behaviour or BehaviourSettings())
    return release_untuned(aggregate, spec, m=m, sigmas=sigmas, moments_share=moments_share,
                           settings=settings, rng=rng, level=level,
                           identification=identification, functionals=functionals)


def _with_estimated_behaviour(aggregate: Any, spec: EvaluationSpec, *, m: int, plan: Any,
                              rng: np.random.Generator, rules: Any) -> tuple[Any, EvaluationSpec]:
    """The plan's ``behaviour`` release over the state-action rows of ``spec`` (their count
    rows), then the value spec and an aggregate that hands every kernel the value route's rows
    under the released propensities (:func:`gpope.core.behaviour_estimate.value_rows_from_pairs`,
    post-processing)."""
    import math

    from gpope.core import behaviour_estimate as be
    from gpope.core.state_action import value_spec

    component = plan.component("behaviour")
    whole = float(component.sigma) * math.sqrt(component.share)
    vspec = value_spec(spec)
    S, K = vspec.n_features, vspec.target_policy.n_actions

    def counts(kernel, width):
        return aggregate(lambda idx, rows: kernel(idx, be.count_rows_from_pairs(rows, vspec)),
                         width)

    est = be.release_behaviour(counts, n_states=S, n_actions=K, m=m,
                               sigma_quantile=whole / math.sqrt(rules.quantile_share),
                               sigma_counts=whole / math.sqrt(rules.share), settings=rules,
                               rng=rng)

    def values(kernel, width):
        return aggregate(lambda idx, rows: kernel(idx, be.value_rows_from_pairs(
            rows, vspec, est.probs)), width)

    return values, vspec


def untuned_result(release: UntunedRelease, *, plan: Any, delta: float, seed: int | None) -> Any:
    """The release in the solver's result record (no iterates, no trace)."""
    from gpope.core.gpope.solver import GPOPEResult

    private = seed is None
    theta = np.asarray(release.theta, dtype=np.float64)
    return GPOPEResult(
        theta=theta, w=np.zeros_like(theta), theta_avg=None, sigma=plan.sigma,
        epsilon=plan.spent_epsilon, delta=delta, accountant=plan.accountant, sampling="poisson",
        iterations=1, clip=release.clip, private=private,
        privacy_note=("tuning-free default: two private quantiles, the clipped sufficient "
                      "statistics and the clipped residuals, noise from OS entropy" if private
                      else "fixed seed: reproducible, NOT private"),
    )
