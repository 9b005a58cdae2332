"""``gpope experiment {chain,mountaincar,hiv}``: paper experiments on simulated data (no Spark).

Tunes the GPOPE variants on public simulated data (another seed) unless ``--tuned FILE`` (from
``gpope tune``) is given, runs the trials, and writes ``trials.csv``, ``summary.json``,
``tuning.json`` and ``figures/*.png`` to ``--out``, plus an MLflow parent run with nested runs
per configuration (default store ``sqlite:///<out>/mlflow.db``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from gpope.cli._common import add_json_flag, emit, stderr_log

_DOMAINS = ("chain", "mountaincar", "hiv")


def floats(text: str) -> tuple[float, ...]:
    """argparse ``type=``: comma-separated numbers."""
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(float(x)) for x in text.split(",") if x.strip())


def add_settings_options(parser: argparse.ArgumentParser) -> None:
    """Options shared by ``experiment`` and ``tune``."""
    parser.add_argument("--quick", action="store_true",
                        help="smoke-test preset: tiny sizes, few trials (about a minute)")
    parser.add_argument("--trials", type=int, default=None, help="trials per cell (paper: 100)")
    parser.add_argument("--sizes", type=_ints, default=None,
                        help="comma-separated data sizes m (chain default 1e5..5e5)")
    parser.add_argument("--epsilons", type=floats, default=None,
                        help="comma-separated epsilons (chain: the first is used; default 0.1)")
    parser.add_argument("--delta", type=float, default=None, help="delta (default 1e-5)")
    parser.add_argument("--iterations", type=int, default=None, help="GPOPE iterations N")
    parser.add_argument("--data-blocks", type=int, default=None,
                        help="fresh simulated data sets per m (trials are spread over them)")
    parser.add_argument("--seed", type=int, default=None, help="experiment seed (default 0)")


def settings_from_args(domain: str, args: argparse.Namespace) -> Any:
    """Build the domain settings from CLI options."""
    from gpope import api

    over: dict[str, Any] = {"trials": args.trials, "delta": args.delta,
                            "iterations": args.iterations, "data_blocks": args.data_blocks,
                            "seed": args.seed}
    if args.sizes:
        over["sizes"] = args.sizes
        if domain == "chain":
            sweep = 300_000 if 300_000 in args.sizes else args.sizes[len(args.sizes) // 2]
            over["sweep_size"] = sweep
            over["tune_sizes"] = tuple(sorted({min(args.sizes), max(args.sizes)}
                                              | ({sweep} if sweep else set())))
        else:
            over["tune_sizes"] = (sorted(args.sizes)[len(args.sizes) // 2],)
    if args.epsilons:
        if domain == "chain":
            over["epsilon"] = args.epsilons[0]
        else:
            over["epsilons"] = args.epsilons
    return api.experiment_settings(domain, quick=args.quick, **over)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``experiment`` command."""
    parser = subparsers.add_parser(
        "experiment",
        help="paper experiments on simulated data: trials, figures, MLflow, results table",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("domain", choices=_DOMAINS, help="experiment domain")
    add_settings_options(parser)
    parser.add_argument("--out", default=None, help="output directory (default ./out/<domain>)")
    parser.add_argument("--tuned", default=None,
                        help="tuning.json from `gpope tune` (default: tune now on public data)")
    parser.add_argument("--public-seed", type=int, default=None,
                        help="seed of the public tuning data (default: seed + 1)")
    parser.add_argument("--tracking-uri", default=None,
                        help="MLflow tracking URI (default sqlite:///<out>/mlflow.db)")
    parser.add_argument("--no-mlflow", action="store_true", help="skip MLflow logging")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    add_json_flag(parser)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from gpope import api
    from gpope.core.experiments import TuningTable

    settings = settings_from_args(args.domain, args)
    out = Path(args.out or f"out/{args.domain}")
    tuning = None
    if args.tuned:
        tuning = TuningTable.from_dict(json.loads(Path(args.tuned).read_text()))
    summary = api.experiment(args.domain, settings, out, tracking_uri=args.tracking_uri,
                             tuning=tuning, public_seed=args.public_seed, log=stderr_log(args),
                             track=not args.no_mlflow)
    lines = [f"{args.domain}: {summary['n_records']} trial records in {out} "
             f"({summary['seconds']['total']:.1f} s; MLflow run {summary['mlflow_run_id']})"]
    for r in summary["cells"]:
        if "rel_mspbe_mean" in r:
            lines.append(f"  [{r['figure']}] m={r['m']:>7} eps={r['epsilon']} {r['label']:45s} "
                         f"relMSPBE {r['rel_mspbe_mean']:.3g} +- {r.get('rel_mspbe_std', 0):.2g}")
    emit(args, summary, "\n".join(lines))
    return 0
