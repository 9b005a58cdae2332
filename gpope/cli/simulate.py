"""``gpope simulate``: write the bronze event tables of a synthetic cohort."""

from __future__ import annotations

import argparse

from gpope.cli._common import (
    add_dataset_option,
    add_lake_options,
    config_from_args,
    emit,
    show_progress,
)
from gpope.cli.domains import domain_arg, domain_help
from gpope.errors import ConfigError


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``simulate`` command."""
    parser = subparsers.add_parser(
        "simulate",
        help="write bronze observations/treatments/outcomes of a synthetic cohort",
        description=("Simulate one episode per patient of a domain under its behaviour policy "
                     "and write them as EHR-style bronze tables (observations, treatments with "
                     "propensities, outcomes) of --dataset, replacing any earlier cohort of that "
                     "name. Then run `gpope ingest --dataset NAME --domain DOMAIN`."),
    )
    parser.add_argument("--domain", required=True, type=domain_arg, help=domain_help("simulated domain"))
    parser.add_argument("--patients", required=True, type=int, help="number of patients (episodes)")
    add_dataset_option(parser)
    parser.add_argument("--seed", type=int, default=None,
                        help="seed (default: OS entropy, not reproducible)")
    parser.add_argument("--steps", type=int, default=None,
                        help="episode cap (default: the domain's, e.g. 200)")
    parser.add_argument("--jitter", type=float, default=0.0,
                        help="timing jitter, fraction of the interval [0, 0.5)")
    parser.add_argument("--stagger-days", type=float, default=0.0,
                        help="spread of patient start dates (days)")
    parser.add_argument("--missing", type=float, default=0.0,
                        help="probability of dropping each observation")
    parser.add_argument("--noise", type=float, default=0.0,
                        help="std of Gaussian noise on recorded observations")
    parser.add_argument("--to-files", metavar="DIR", default=None,
                        help="write the cohort as plain files under DIR instead of the lake (no "
                             "Spark): observations/treatments/outcomes files and conf.yaml with "
                             "its 'datasets:' entry; for random_mdp/<seed> also spec.yaml (an "
                             "own-data spec) and truth.json (exact values). Load them with `gpope "
                             "load` (docs/OWN_DATA.md)")
    parser.add_argument("--format", choices=("parquet", "csv"), default="parquet",
                        help="file format of --to-files (default parquet)")
    parser.add_argument(
        "--variables", metavar="NAME=LEVELS,...", default=None,
        help="with --to-files and random_mdp/<seed>: chart each state as these discrete "
        "measurements (e.g. lactate=4,bp=4, row-major; the levels multiply to the MDP's number "
        "of states); conf.yaml and spec.yaml then name them (docs/OWN_DATA.md)")
    parser.add_argument("--no-propensity", action="store_true",
                        help="with --to-files: write the treatments without the propensity "
                             "column, as an extract whose behaviour probabilities were not logged")
    add_lake_options(parser, progress=True)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from gpope import api
    from gpope.core.validation import check_int

    check_int("gpope simulate", "patients", args.patients, ge=1)
    options = api.SimulateOptions(n_steps=args.steps, jitter=args.jitter,
                                  stagger_days=args.stagger_days, missing_prob=args.missing,
                                  noise=args.noise)
    if (args.variables or args.no_propensity) and args.to_files is None:
        raise ConfigError("--variables and --no-propensity shape the files of --to-files; add "
                          "--to-files DIR (the lake's simulated tables keep the domain's form).")
    if args.to_files is not None:
        written = api.write_cohort_files(args.domain, args.patients, args.seed, args.to_files,
                                     options=options, fmt=args.format, dataset=args.dataset,
                                     progress=show_progress(args),
                                     variables=_levels(args.variables),
                                     propensity=not args.no_propensity)  # fmt: skip
        lines = [f"simulate {args.dataset}: {args.patients} {args.domain} patients as files"]
        lines += [f"  {t:<13}{written['rows'][t]:>10} rows  {p}" for t, p in written["files"].items()]
        lines += [f"  {k:<13}{'':>10}       {written[k]}" for k in ("conf", "spec", "truth")
                  if written[k]]
        emit(args, written, "\n".join(lines))
        return 0
    config = config_from_args(args)
    api.check_stage("simulate", args.dataset, config=config)  # fail fast, before Spark starts
    spark = api.get_spark(config)
    report = api.simulate(spark, args.dataset, config=config, domain=args.domain,
                          patients=args.patients, seed=args.seed, options=options,
                          progress=show_progress(args))
    emit(args, report.to_dict(), report.summary())
    return 0


def _levels(text: str | None) -> dict[str, int] | None:
    """``lactate=4,bp=4`` as ``{"lactate": 4, "bp": 4}``; ConfigError naming the form."""
    if not text:
        return None
    out: dict[str, int] = {}
    for part in text.split(","):
        name, _, levels = part.strip().partition("=")
        if not name or not levels.strip().isdigit() or name in out:
            raise ConfigError(f"--variables takes NAME=LEVELS pairs separated by commas, each "
                              f"name once (e.g. lactate=4,bp=4); got {text!r}.")
        out[name.strip()] = int(levels)
    return out
