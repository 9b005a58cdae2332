"""``gpope tune --domain D``: choose GPOPE step sizes and clip bounds on PUBLIC simulated data.

Simulates a separate data set per size from the public seed (never the evaluation data), runs a
grid of (step size, clip) per GPOPE variant, and writes the winners and the whole grid as JSON
(``--out``), to be passed to ``gpope experiment --tuned FILE``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gpope.shell.cli._common import add_json_flag, emit
from gpope.shell.cli.experiment import _DOMAINS, add_settings_options, settings_from_args


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``tune`` command."""
    parser = subparsers.add_parser(
        "tune", help="tune GPOPE step sizes / clip bounds on public simulated data",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--domain", choices=_DOMAINS, required=True, help="experiment domain")
    add_settings_options(parser)
    parser.add_argument("--public-seed", type=int, default=None,
                        help="seed of the public data (default: experiment seed + 1)")
    parser.add_argument("--out", default=None, help="output JSON (default ./out/<domain>/tuning.json)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    add_json_flag(parser)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from gpope.shell.experiments import run_tuning

    settings = settings_from_args(args.domain, args)

    def log(msg: str) -> None:
        if not args.quiet:
            print(msg, file=sys.stderr, flush=True)

    table = run_tuning(args.domain, settings, public_seed=args.public_seed, log=log)
    out = Path(args.out or f"out/{args.domain}/tuning.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = table.to_dict()
    out.write_text(json.dumps(payload, indent=2))
    lines = [f"tuned on public data (seed {table.seed}) -> {out}"]
    lines += [f"  {r['method']:14s} m={r['m']:>7} eps={r['epsilon']}: step {r['step_size']:g}, "
              f"clip {r['clip']:g}" for r in payload["best"]]
    emit(args, payload, "\n".join(lines))
    return 0
