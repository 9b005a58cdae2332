"""Scheduler entry points: one ``main`` per pipeline stage, over :mod:`gpope.api`.

They are the console scripts ``gpope-<stage>`` (a Databricks ``python_wheel_task``'s
``entry_point``), which ``jobs/*.py`` call too. Each prints the stage's report and returns 0, or a
one-line reason and 2 for a :class:`~gpope.errors.GpopeError`; stopped by SIGTERM or Ctrl-C, one
line saying what it committed and 143 or 130 (:mod:`gpope.shell.interrupts`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from gpope.cli.domains import domain_arg
from gpope.errors import GpopeError
from gpope.shell.pipeline.jobargs import job_parser, job_setup

__all__ = ["demo", "evaluate", "grants", "ingest", "simulate", "stats"]

def _run(name: str, body: Callable[[argparse.Namespace], str], args: argparse.Namespace) -> int:
    from gpope import api

    api.start_command()  # SIGTERM (the scheduler's stop) is handled like Ctrl-C
    try:
        print(body(args))
    except GpopeError as exc:
        print(f"gpope-{name}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # one line: what the stop left committed and what not
        # the JVM this command started stops with it, silently
        stopped = api.command_stopped(name, getattr(args, "dataset", None), exc)
        if getattr(exc, "summary", None):
            print(exc.summary)  # type: ignore[attr-defined]
        print(f"gpope-{name}: {stopped.line}", file=sys.stderr)
        return stopped.exit_code
    return 0


def simulate(argv: Sequence[str] | None = None) -> int:
    """``gpope-simulate``: a synthetic cohort -> the dataset's bronze tables (replaced)."""
    parser = job_parser("Simulate a cohort into the dataset's bronze tables.", dataset=True)
    parser.add_argument("--domain", default="hiv", type=domain_arg)
    parser.add_argument("--patients", type=int, default=2000, help="patients (episodes)")
    parser.add_argument("--steps", type=int, default=None,
                        help="decisions recorded per patient (default: the domain's)")
    parser.add_argument("--seed", type=int, default=None, help="simulation seed (default: OS entropy)")
    parser.add_argument("--if-missing", action="store_true",
                        help="simulate only when the dataset has no bronze tables yet (a scheduled "
                        "job's producer: the first run creates the cohort, later runs keep it)")
    args = parser.parse_args(argv)

    def body(a: argparse.Namespace) -> str:
        from gpope import api

        spark, config, _ = job_setup(a)
        if a.if_missing:
            present = api.bronze_tables(spark, a.dataset, config=config)
            if all(present.values()):
                return (f"dataset {a.dataset!r} already has its bronze tables "
                        f"({', '.join(present)}); nothing simulated (--if-missing)")
        return api.simulate(spark, a.dataset, domain=a.domain, patients=a.patients, seed=a.seed,
                            options=api.SimulateOptions(n_steps=a.steps), config=config).summary()

    return _run("simulate", body, args)


def ingest(argv: Sequence[str] | None = None) -> int:
    """``gpope-ingest``: bronze events -> silver transitions and rejected_events."""
    parser = job_parser("Bronze events -> silver transitions and rejected_events.", dataset=True)
    parser.add_argument("--domain", default=None, type=domain_arg,
                        help="simulated domain of a dataset not configured under 'datasets:'")
    args = parser.parse_args(argv)

    def body(a: argparse.Namespace) -> str:
        from gpope import api
        from gpope.shell.operator import record_private

        spark, config, _ = job_setup(a)
        report = api.ingest(spark, a.dataset, domain=a.domain, config=config)
        # job stdout is readable by anyone viewing the job: no count is printed there; m, row
        # counts and rejections per reason are noise-free counts of the private data (m is
        # released only as the noisy count m~)
        where = record_private(config, stage="ingest", dataset=a.dataset, payload=report.to_dict())
        return f"ingest {a.dataset}: silver transitions written; {where}"

    return _run("ingest", body, args)


def stats(argv: Sequence[str] | None = None) -> int:
    """``gpope-stats``: silver transitions -> gold trajectory_stats for an evaluation spec."""
    parser = job_parser("Silver transitions -> gold trajectory_stats for a spec.", dataset=True,
                        spec=True)
    args = parser.parse_args(argv)

    def body(a: argparse.Namespace) -> str:
        from gpope import api
        from gpope.shell.operator import record_private

        spark, config, spec = job_setup(a)
        report = api.stats(spark, a.dataset, spec or a.spec, config=config)
        # m, the number of transitions (sum of tau) and the clamp counts are noise-free counts
        # of the private data: operator log only, never the job's stdout
        where = record_private(config, stage="stats", dataset=a.dataset, payload={
            "n_trajectories": report.n_trajectories, "n_transitions": report.n_transitions,
            "spec_id": report.spec_id, "clamped": dict(report.clamped)})
        return (f"trajectory_stats for {a.dataset} / spec {report.spec_name} ({report.spec_id}): "
                f"n = {report.n_features} -> {report.table}; {where}")

    return _run("stats", body, args)


def evaluate(argv: Sequence[str] | None = None) -> int:
    """``gpope-evaluate``: a private evaluation (ledger, released_estimates, MLflow)."""
    from gpope.cli.evaluate import add_privacy_overrides, add_solver_options, settings_from_args

    parser = job_parser("A differentially private evaluation of a spec on a dataset.",
                        dataset=True, spec=True)
    parser.add_argument("--epsilon", type=float, required=True, help="epsilon spent by this run")
    parser.add_argument("--delta", type=float, required=True, help="delta spent by this run")
    parser.add_argument("--seed", type=int, default=None, help="fixed seed: NOT private")
    add_solver_options(parser)
    add_privacy_overrides(parser)
    args = parser.parse_args(argv)

    def body(a: argparse.Namespace) -> str:
        from gpope import api
        from gpope.shell.pipeline.jobargs import config_from_args

        config = config_from_args(a)
        # the arguments, the spec and the configuration are checked before Spark starts
        options = api.evaluate_options(config, epsilon=a.epsilon, delta=a.delta, seed=a.seed,
                                       solver=settings_from_args(a))
        api.check_evaluation(a.spec, options, dataset=a.dataset, config=config)
        spark = api.get_spark(config)
        # a stale-statistics refusal names the spec file the job was given (api.evaluate)
        return api.evaluate(spark, a.dataset, a.spec, epsilon=a.epsilon, delta=a.delta,
                            options=options, config=config, tracking_uri=a.tracking_uri).summary()

    return _run("evaluate", body, args)


def demo(argv: Sequence[str] | None = None) -> int:
    """``gpope-demo``: the simulated HIV cohort through the whole private pipeline."""
    parser = job_parser("The simulated HIV cohort end to end (simulate, ingest, stats, evaluate).")
    parser.add_argument("--patients", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--allow-invalid-accounting", action="store_true",
                        help="accept evaluation.accountant 'paper' (the release is NOT private)")
    args = parser.parse_args(argv)

    def body(a: argparse.Namespace) -> str:
        from gpope import api

        spark, config, _ = job_setup(a)
        options = api.DemoOptions(patients=a.patients, steps=a.steps, progress=False,
                              allow_invalid_accounting=a.allow_invalid_accounting)
        return api.demo(spark, options=options, config=config,
                        tracking_uri=a.tracking_uri).summary()

    return _run("demo", body, args)


def grants(argv: Sequence[str] | None = None) -> int:
    """``gpope-grants``: the analysts' group may read the release tables, nothing else (UC)."""
    parser = job_parser("Grant an analysts' group USE SCHEMA and SELECT on the release tables "
                        "(released_values, released_estimates, privacy_ledger, released_counts) only.")
    parser.add_argument("--group", required=True,
                        help="the workspace group of analysts (e.g. gpope-analysts)")
    args = parser.parse_args(argv)

    def body(a: argparse.Namespace) -> str:
        from gpope.shell.grants import check_grants, run_grants
        from gpope.shell.pipeline.jobargs import config_from_args

        check_grants(config_from_args(a), a.group)  # refused before Spark starts
        spark, config, _ = job_setup(a)
        return run_grants(spark, config, a.group)

    return _run("grants", body, args)
