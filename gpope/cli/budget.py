"""``gpope budget show|set|reconcile``: a dataset's privacy budget, spent and remaining (the ledger).

On a local lake these commands read and write the ledger's Delta table with ``deltalake`` only:
no Spark, no JVM (about a second). A Unity Catalog lake goes through Spark.
"""

from __future__ import annotations

import argparse

from gpope.cli._common import add_lake_options, config_from_args, emit


def _add_lake(parser: argparse.ArgumentParser) -> None:
    add_lake_options(parser, remote=False)
    # accepted for scripts written before; the ledger never logs to MLflow
    parser.add_argument("--tracking-uri", default=None, help=argparse.SUPPRESS)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``budget`` command group."""
    parser = subparsers.add_parser(
        "budget",
        help="privacy ledger: a dataset's budget, spent and remaining (epsilon, delta)",
        description=("The privacy ledger records every private run's spend before it releases "
                     "anything. Runs are composed tightly from their stored dp-accounting events "
                     "(an RDP privacy filter, valid when runs are chosen adaptively; "
                     "privacy.composition: rdp) and the basic sum of epsilons is shown beside "
                     "it. A run that would exceed the budget stops with an error and writes "
                     "nothing. Reads the ledger without Spark on a local lake."),
    )
    sub = parser.add_subparsers(dest="budget_command", metavar="{show,set,reconcile}")
    show = sub.add_parser("show", help="print budget, spent (tight and basic), remaining and runs left")
    show.add_argument("--dataset", required=True, help="dataset (cohort) name; must exist")
    show.add_argument("--relation", choices=("add_or_remove_one", "replace_one"), default=None,
                      help="also state each counted run's epsilon under this neighbouring "
                      "relation (replace_one: an add/remove run restated, with its mu doubled; "
                      "docs/ARCHITECTURE.md section 4)")
    _add_lake(show)
    show.set_defaults(func=_show)
    set_ = sub.add_parser(
        "set", help="set a dataset's total budget (epsilon, delta); raising one needs --force"
    )
    set_.add_argument("--dataset", required=True, help="dataset (cohort) name; must exist")
    set_.add_argument("--epsilon", type=float, required=True, help="total epsilon budget (> 0)")
    set_.add_argument("--delta", type=float, required=True, help="total delta budget (in (0, 1))")
    set_.add_argument("--force", action="store_true",
                      help="allow raising an existing budget (recorded with who and when)")
    _add_lake(set_)
    set_.set_defaults(func=_set)
    rec = sub.add_parser(
        "reconcile",
        help="settle reservations of killed runs from the evidence (released_estimates)",
        description=("A run killed after its reservation leaves it open. Reconcile marks each "
                     "stale reservation 'released' if released_estimates has its run_id, else "
                     "'failed' (still counted: it may have drawn noise). Stale: its process is "
                     "gone (same host) or it is older than privacy.reservation_timeout_hours. A "
                     "run released in the lake (released_estimates, released_values) that the "
                     "ledger does not know (a removed or restored ledger) is charged its "
                     "recorded epsilon and delta. Runs automatically before each evaluate's "
                     "reservation."),
    )
    rec.add_argument("--dataset", default=None, help="only this dataset (default: all)")
    _add_lake(rec)
    rec.set_defaults(func=_reconcile)
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])


def _ledger(args: argparse.Namespace):
    from gpope import api

    return api.privacy_ledger(config_from_args(args))


def _show(args: argparse.Namespace) -> int:
    ledger = _ledger(args)
    status = ledger.status(args.dataset, require_known=True)
    ledger.check_lake(args.dataset)
    shown, text = status.to_dict(), status.summary()
    extra, lines = _relations(status, getattr(args, "relation", None))
    counts, count_lines = _counts(args)
    emit(args, {**shown, **extra, "released_counts": counts}, "\n".join([text, *lines,
                                                                          *count_lines]))
    return 0


def _counts(args: argparse.Namespace) -> tuple[list[dict], list[str]]:
    """The dataset's released numbers of patients m~ (public; each charged once in the ledger,
    docs/ARCHITECTURE.md section 4), as ``--json`` rows and lines."""
    from gpope import api

    rows = api.released_counts(args.dataset, config=config_from_args(args))
    lines = [f"  m~         {r['m_noisy']} (statistics version {r['stats_version']}; noise std "
             f"{r['noise_std']:.3g}; charged epsilon {r['epsilon']:g}, delta {r['delta']:g}"
             + ("" if r["private"] else "; drawn from a fixed seed: NOT private")
             + f"; run {r['run_id']})" for r in rows]
    return rows, lines or ["  m~         none released yet"]


def _relations(status, relation: str | None) -> tuple[dict, list[str]]:
    """The relation the counted runs are charged under and, with ``relation``, each run's
    epsilon restated under it (the core's :mod:`gpope.core.accounting.relations`)."""
    from gpope.core.accounting.relations import restate, stored_relation

    said = {"add_or_remove_one": "add/remove-one", "replace_one": "replace-one"}
    charged = sorted({r for e in status.counted if (r := stored_relation(e.mechanism))})
    out: dict = {"relation": charged[0] if len(charged) == 1 else charged or None}
    line = ("  relation   " + (", ".join(said.get(r, r) for r in charged)
                                + " adjacency (the counted runs' events are charged under it)"
                                if charged else "none yet (no counted run)"))
    if "add_or_remove_one" in charged:
        line += ("; add/remove-one holds: m is public only as the noisy count m~ "
                 "(--relation replace_one restates each run)")
    lines = [line]
    if relation is not None:
        runs: dict[str, float | None] = {}
        for e in status.counted:
            own = stored_relation(e.mechanism)
            runs[e.run_id] = (float(e.charged_epsilon) if own == relation
                              else restate(e.mechanism, relation=relation, delta=e.delta))
        known = [v for v in runs.values() if v is not None]
        total = float(sum(known)) if len(known) == len(runs) else None
        out["under_relation"] = {"relation": relation, "runs": runs, "sum": total}
        lines.append(f"  under {said[relation]} adjacency (each run at its own delta):")
        lines += [f"    {run_id}  epsilon " + ("n/a" if v is None else f"{v:.6g}")
                  for run_id, v in runs.items()]
        lines.append("    sum of epsilons " + ("n/a" if total is None else f"{total:.6g}"))
    return out, lines


def _set(args: argparse.Namespace) -> int:
    from gpope.core.validation import check_number

    check_number("budget set", "epsilon", args.epsilon, gt=0.0)  # fail before touching the lake
    check_number("budget set", "delta", args.delta, gt=0.0, lt=1.0)
    status = _ledger(args).set_budget(args.dataset, epsilon=args.epsilon, delta=args.delta,
                                      force=args.force, require_known=True)
    emit(args, status.to_dict(), status.summary())
    return 0


def _reconcile(args: argparse.Namespace) -> int:
    ledger = _ledger(args)
    if args.dataset is not None:
        ledger.check_known(args.dataset)
    done = ledger.reconcile(args.dataset)
    lines = [f"reconciled {len(done)} stale reservation(s) in {ledger.location}"]
    lines += [f"  {s.dataset} {s.run_id}: {s.status} ({s.evidence})" for s in done]
    emit(args, {"ledger": ledger.location, "settled": [s.to_dict() for s in done]},
         "\n".join(lines))
    return 0
