"""How many scheduled evaluations a dataset's budget admits, by the ledger's own rule.

The bundle's daily evaluate spends (epsilon, delta) per run against the dataset budget of the
configuration's ``privacy:`` section. This plans one such run (the spec's tuned settings at m
trajectories; nothing is drawn: the plan is public) and counts how many runs like it the
ledger admits: under ``composition: basic`` (epsilons and deltas add) and under the
configuration's composition (``rdp``: the Rényi filter over the runs' stored events,
:func:`gpope.core.accounting.composition.filter_epsilon`, the rule of
:mod:`gpope.core.accounting.budget`)::

    .venv/bin/python benchmarks/bundle_budget.py --conf conf/databricks.yaml \\
        --spec conf/specs/hiv_demo.yaml --m 20000 --epsilon 0.1 --delta 3e-7
"""

from __future__ import annotations

import argparse
import json
import math

import yaml


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conf", default="conf/databricks.yaml")
    parser.add_argument("--spec", default="conf/specs/hiv_demo.yaml")
    parser.add_argument("--m", type=int, default=20000, help="trajectories of the dataset")
    parser.add_argument("--epsilon", type=float, default=0.1, help="spend per run")
    parser.add_argument("--delta", type=float, default=3e-7, help="spend per run")
    parser.add_argument("--limit", type=int, default=100000, help="stop counting here")
    args = parser.parse_args()

    from gpope import api
    from gpope.core.accounting.budget import TOLERANCE
    from gpope.core.accounting.composition import StoredMechanism, filter_epsilon, rdp_curve
    from gpope.core.evaluation import plan_release
    from gpope.core.evaluation.settings import resolve_settings
    from gpope.core.spec import EvaluationSpec

    config = api.load_config(args.conf)
    with open(args.spec) as fh:
        spec = EvaluationSpec.from_mapping(yaml.safe_load(fh))
    flags = api.evaluate_options(config, epsilon=args.epsilon, delta=args.delta)
    settings, _ = resolve_settings(config.evaluation, spec, flags, m=args.m)
    # the statistics release's clip scales what is released, not its noise multiplier: the
    # event (and so every count below) is the same for any clip
    plan = plan_release(settings, m=args.m, spec=spec, layout="dense", statistics_clip=1.0)
    budget_eps, budget_delta = config.privacy.default_epsilon, config.privacy.default_delta
    basic = min(math.floor((budget_eps + TOLERANCE) / plan.charged_epsilon),
                math.floor(budget_delta * (1 + TOLERANCE) / plan.delta))
    curve = rdp_curve(StoredMechanism(event=plan.event, relation=plan.relation))

    def fits(k: int) -> bool:
        return filter_epsilon([(plan.relation, curve * k)], budget_delta) <= budget_eps + TOLERANCE

    lo, hi = 1, 2  # fits(1): one run within the budget on its own certificate
    while hi <= args.limit and fits(hi):
        lo, hi = hi, 2 * hi
    hi = min(hi, args.limit + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    print(json.dumps({"conf": args.conf, "spec": args.spec, "m": args.m,
                      "run": [args.epsilon, args.delta], "estimator": settings.estimator,
                      "budget": [budget_eps, budget_delta],
                      "composition": config.privacy.composition,
                      "runs_admitted_basic": basic, "runs_admitted_rdp_filter": lo}))


if __name__ == "__main__":
    main()
