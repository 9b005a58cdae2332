"""``gpope tune``: choose GPOPE settings on PUBLIC simulated data (never the evaluation data).

``gpope tune --spec FILE``: tune the spec's operating point (clip and step size per epsilon, at the
budget, schedule and averaging of its evaluation: block or of the configuration) on a public
simulated cohort of the spec's domain, and write the spec's ``evaluation:`` block, with the
cohort's seed, size and grid recorded in it. ``gpope evaluate``, the demo and the Databricks jobs
read that block; their flags override it.

``gpope tune --domain D``: the experiment harness's tuning (a grid of (step size, clip) per GPOPE
variant and size), written as JSON (``--out``) for ``gpope experiment --tuned FILE``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from gpope.cli._common import add_json_flag, emit, stderr_log
from gpope.cli.evaluate import add_solver_flags
from gpope.cli.experiment import _DOMAINS, add_settings_options, floats, settings_from_args
from gpope.core.accounting.registry import accountant_choices, accountant_help


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``tune`` command."""
    parser = subparsers.add_parser(
        "tune", help="tune GPOPE step sizes / clip bounds on public simulated data",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--spec", default=None,
                        help="evaluation spec YAML: write its evaluation: block")
    target.add_argument("--domain", choices=_DOMAINS, help="experiment domain (harness tuning)")
    g = parser.add_argument_group("--spec tuning")
    g.add_argument("--patients", type=int, default=10000,
                   help="size of the public simulated cohort (default 10000)")
    g.add_argument("--max-length", type=int, default=None,
                   help="episode length of the public cohort (default: the simulator's)")
    g.add_argument("--clip-grid", type=floats, default=None,
                   help="comma-separated clips (default: multiples of the public gradient scale)")
    g.add_argument("--step-grid", type=floats, default=None,
                   help="comma-separated step sizes (default: decades around the public eta0)")
    g.add_argument("--dry-run", action="store_true", help="print the block, do not write it")
    g.add_argument("--conf", default=None, help="gpope YAML configuration (fallback settings)")
    add_solver_flags(g, ("--passes", "--batch-rate", "--batch-size", "--step-schedule",
                         "--step-offset", "--step-offset-fraction", "--averaging",
                         "--tail-fraction", "--sampling"))
    g.add_argument("--accountant", choices=accountant_choices(), default=None,
                   help=accountant_help())
    add_settings_options(parser)  # --trials (default 3), --epsilons (default 0.1,1,10),
    # --delta (default 1e-6) and --iterations (fixed N) apply to --spec too
    parser.add_argument("--public-seed", type=int, default=None,
                        help="seed of the public data (default: experiment seed + 1; with --spec "
                        "a fixed public seed, which the spec's evaluation: block records)")
    parser.add_argument("--out", default=None, help="output JSON (default ./out/<domain>/tuning.json)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    add_json_flag(parser)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    if args.spec is not None:
        return _run_spec(args)
    return _run_domain(args)


def _run_spec(args: argparse.Namespace) -> int:
    from gpope import api
    overrides = {k: getattr(args, k, None) for k in (
        "passes", "iterations", "batch_rate", "batch_size", "step_schedule", "step_offset",
        "step_offset_fraction", "averaging", "tail_fraction", "sampling", "accountant")}
    report = api.tune_spec(args.spec, settings=api.load_config(args.conf or None).evaluation,
                           patients=args.patients, max_length=args.max_length,
                           public_seed=args.public_seed, epsilons=args.epsilons or (0.1, 1.0, 10.0),
                           delta=args.delta if args.delta is not None else 1e-6,
                           trials=args.trials if args.trials is not None else 3,
                           overrides=overrides, clips=args.clip_grid, steps=args.step_grid,
                           write=not args.dry_run, log=stderr_log(args),
                           command=" ".join(["gpope", *(shlex.quote(a) for a in sys.argv[1:])])
                           if sys.argv[1:2] == ["tune"] else None)
    emit(args, report.to_dict(), report.summary())
    return 0


def _run_domain(args: argparse.Namespace) -> int:
    from gpope import api

    settings = settings_from_args(args.domain, args)
    table = api.tune_experiment(args.domain, settings, public_seed=args.public_seed,
                                log=stderr_log(args))
    out = Path(args.out or f"out/{args.domain}/tuning.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = table.to_dict()
    out.write_text(json.dumps(payload, indent=2))
    lines = [f"tuned on public data (seed {table.seed}) -> {out}"]
    lines += [f"  {r['method']:14s} m={r['m']:>7} eps={r['epsilon']}: step {r['step_size']:g}, "
              f"clip {r['clip']:g}" for r in payload["best"]]
    emit(args, payload, "\n".join(lines))
    return 0
