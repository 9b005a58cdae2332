"""``gpope track --run-id RUN``: log a released run to MLflow again, from the lake (no budget)."""

from __future__ import annotations

import argparse

from gpope.cli._common import add_lake_options, config_from_args, emit


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``track`` command."""
    parser = subparsers.add_parser(
        "track",
        help="log a released run to MLflow from the lake (after a tracking failure; no budget)",
        description=("An evaluation commits its release before it logs to MLflow, so a tracking "
                     "failure (store locked, unreachable, disk full) leaves a released, charged "
                     "run without an MLflow run; the evaluate command then prints this command. "
                     "It rebuilds the run from released_estimates and released_values (released "
                     "numbers only: values, intervals, theta, epsilon, delta, accountant, spec) "
                     "and logs it, tagged gpope.relogged=lake. It reads no private table, draws "
                     "no noise and spends no budget; a run that MLflow already holds is left "
                     "alone unless --force. No Spark, no JVM (local lakes)."),
    )
    parser.add_argument("--run-id", required=True, help="the gpope run id (released_estimates.run_id)")
    parser.add_argument("--force", action="store_true",
                        help="log it even when a finished MLflow run already holds this run id")
    add_lake_options(parser, tracking=True, remote=False)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from gpope import api
    from gpope.errors import GpopeError

    config = config_from_args(args)
    try:  # an unreachable server fails in seconds
        report = api.track(args.run_id, force=args.force, config=config,
                           tracking_uri=args.tracking_uri)
    except GpopeError:
        raise
    except Exception as exc:  # MLflow's own errors: one line, the run stays as it was
        text = str(exc).strip()
        raise GpopeError(f"MLflow did not take run {args.run_id} ({type(exc).__name__}: "
                         f"{text.splitlines()[0][:300] if text else ''}); the release is "
                         "unchanged in the lake and still untracked: run this command "
                         "again when the tracking server answers.") from exc
    emit(args, report.to_dict(), report.summary())
    return 0
