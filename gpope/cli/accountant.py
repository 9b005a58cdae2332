"""``gpope accountant calibrate|epsilon|compare``: the privacy accounting of GPOPE.

Thin wrappers over :mod:`gpope.core.accounting`: parse, call one function, print.
"""

from __future__ import annotations

import argparse
from typing import Any

from gpope.cli._common import add_json_flag, emit
from gpope.core.accounting.registry import (
    AUTO,
    accountant_choices,
    accountant_help,
    accountant_info,
)

_ADJACENCY = {"uniform": "replace-one (2h)", "poisson": "add/remove (h)"}


def _count(text: str) -> int:
    """An integer count; accepts ``100000`` and ``1e5``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")
    return int(value)


def _add_common(parser: argparse.ArgumentParser, *, with_accountant: bool = True) -> None:
    parser.add_argument("--m", type=_count, required=True,
                        help="number of trajectories (patients), public; e.g. 1e5")
    parser.add_argument("--iterations", "-N", type=_count, required=True,
                        help="number of noisy gradient steps N")
    parser.add_argument("--delta", type=float, default=1e-5, help="target delta (default 1e-5)")
    if with_accountant:
        parser.add_argument("--accountant", default=AUTO, choices=accountant_choices(),
                            help=accountant_help())
    parser.add_argument("--sampling", default="uniform", choices=("uniform", "poisson"),
                        help="uniform: one trajectory per step (the paper; replace-one adjacency, "
                             "sensitivity 2h); poisson: each trajectory with probability "
                             "--batch-rate (add/remove, h)")
    parser.add_argument("--batch-rate", type=float, default=None,
                        help="Poisson rate q in (0, 1] (sampling=poisson only; default 1/m)")
    add_json_flag(parser)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``accountant`` command group."""
    parser = subparsers.add_parser(
        "accountant",
        help="privacy accounting: sigma for a target epsilon, epsilon for a sigma",
        description=(
            "Privacy accounting of GPOPE. sigma is the noise multiplier relative to the clip "
            "bound h (noise std = h * sigma). Accountants: " + accountant_help() + "."
        ),
    )
    sub = parser.add_subparsers(dest="accountant_command", metavar="{calibrate,epsilon,compare}")

    cal = sub.add_parser("calibrate", help="smallest sigma that meets a target epsilon",
                         description="Print the smallest noise multiplier sigma whose certified "
                                     "epsilon is <= --epsilon.")
    cal.add_argument("--epsilon", type=float, required=True, help="target epsilon (> 0)")
    _add_common(cal)
    cal.set_defaults(func=_calibrate)

    eps = sub.add_parser("epsilon", help="epsilon spent by a run with a given sigma",
                         description="Print the epsilon certified for noise multiplier --sigma.")
    eps.add_argument("--sigma", type=float, required=True,
                     help="noise multiplier relative to the clip bound (> 0)")
    _add_common(eps)
    eps.set_defaults(func=_epsilon)

    cmp_ = sub.add_parser(
        "compare", help="sigma needed by every accountant/sampling combination, side by side",
        description="Calibrate sigma for --epsilon with every supported accountant and "
                    "sampling (Poisson rate --batch-rate, default 1/m) and print a table. "
                    "The 'paper' row is the paper's formula: not a valid bound.",
    )
    cmp_.add_argument("--epsilon", type=float, required=True, help="target epsilon (> 0)")
    _add_common(cmp_, with_accountant=False)
    cmp_.set_defaults(func=_compare)
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])


def _batch_rate(args: argparse.Namespace) -> float | None:
    if args.sampling == "poisson" and args.batch_rate is None and args.m >= 1:
        return 1.0 / args.m
    return args.batch_rate


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    return {"m": args.m, "iterations": args.iterations, "delta": args.delta,
            "sampling": args.sampling, "batch_rate": _batch_rate(args)}


def _emit_labelled(args: argparse.Namespace, payload: dict[str, Any], text: str, resolved: str) -> int:
    """Print the result; the result of an accountant that is not a valid bound carries its
    caveat."""
    caveat = accountant_info(resolved).caveat
    if caveat:
        payload["note"] = caveat
        text += f"\n{caveat}"
    emit(args, payload, text)
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    from gpope.core.accounting import calibrate, resolve_accountant

    kw = _settings(args)
    cal = calibrate(epsilon=args.epsilon, accountant=args.accountant, **kw)
    sigma = cal.sigma
    resolved = resolve_accountant(args.accountant, args.sampling)
    payload = {"sigma": sigma, "epsilon": args.epsilon, "accountant": resolved, **kw,
               "certified_by": cal.certified_by, "certified_epsilon": cal.epsilon}
    text = f"sigma = {sigma:.6g}  ({resolved}, {args.sampling}, epsilon {args.epsilon:g}, delta {args.delta:g})"
    if cal.note:
        payload["fallback_note"] = cal.note
        text += f"\nnote: {cal.note}"
    return _emit_labelled(args, payload, text, resolved)


def _epsilon(args: argparse.Namespace) -> int:
    from gpope.core.accounting import epsilon_spent, resolve_accountant

    kw = _settings(args)
    eps = epsilon_spent(sigma=args.sigma, accountant=args.accountant, **kw)
    resolved = resolve_accountant(args.accountant, args.sampling)
    payload = {"epsilon": eps, "sigma": args.sigma, "accountant": resolved, **kw}
    text = f"epsilon = {eps:.6g}  ({resolved}, {args.sampling}, sigma {args.sigma:g}, delta {args.delta:g})"
    return _emit_labelled(args, payload, text, resolved)


def _compare(args: argparse.Namespace) -> int:
    from gpope.core.accounting import calibrate_sigma
    from gpope.core.accounting.registry import supported_pairs

    q = args.batch_rate if args.batch_rate is not None else 1.0 / args.m
    rows = []
    for accountant, sampling in supported_pairs():
        rate = q if sampling == "poisson" else None
        info = accountant_info(accountant)
        sigma = calibrate_sigma(m=args.m, iterations=args.iterations, epsilon=args.epsilon,
                                delta=args.delta, accountant=accountant, sampling=sampling,
                                batch_rate=rate)
        rows.append({
            "accountant": accountant, "sampling": sampling, "batch_rate": rate,
            "adjacency": _ADJACENCY[sampling] if info.rigorous else "paper's (h)",
            "sigma": sigma, "note": info.caveat or "rigorous upper bound",
        })
    header = (f"sigma for epsilon {args.epsilon:g}, delta {args.delta:g}, m {args.m}, "
              f"N {args.iterations} (Poisson rate {q:.3g})")
    lines = [header, f"{'accountant':<11}{'sampling':<9}{'adjacency':<18}{'sigma':>10}  note"]
    for r in rows:
        lines.append(f"{r['accountant']:<11}{r['sampling']:<9}{r['adjacency']:<18}"
                     f"{r['sigma']:>10.4f}  {r['note']}")
    emit(args, {"epsilon": args.epsilon, "delta": args.delta, "m": args.m,
                "iterations": args.iterations, "rows": rows}, "\n".join(lines))
    return 0
