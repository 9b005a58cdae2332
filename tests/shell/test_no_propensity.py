"""An extract without a propensity column goes from files to a private release (issue 37.1).

Generated data (exact values known) written as files, the treatments' ``propensity`` column
dropped, then the documented commands: ingest keeps every row with ``behavior_prob`` null, stats
stores the state-action statistics under their own spec id, and evaluate estimates the
behaviour policy privately inside the run's one composed event (checked against dp-accounting's
PLD) before releasing the values, and the policy value rows: J(target) by the direct method
(the value fit averaged over the first states, oracle: start . (I - gamma P_pi)^-1 r_pi) and
J(behaviour) as the mean recorded return (oracle: the behaviour's discounted return over the
recorded horizon, sum_{t < H} gamma^t start P_mu^t r_mu).
"""

from __future__ import annotations

import json

import numpy as np
import pytest


def _gaussian_leaves(event):
    import dp_accounting

    if isinstance(event, dp_accounting.ComposedDpEvent):
        return [g for e in event.events for g in _gaussian_leaves(e)]
    assert isinstance(event, dp_accounting.GaussianDpEvent)
    return [event]


def test_an_extract_without_propensities_is_evaluated_by_the_estimated_behaviour(
        spark, tmp_path, monkeypatch, capsys):
    import dp_accounting
    import pyarrow.parquet as pq
    from dp_accounting.pld import PLDAccountant

    from gpope import api
    from gpope.cli import main
    from gpope.core.accounting.composition import mechanism_from_json
    from gpope.core.state_action import state_action_spec
    from gpope.shell.pipeline.ledger import PrivacyLedger

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    d = "mydata"
    assert main(["simulate", "--domain", "random_mdp/7", "--patients", "4000", "--seed", "7",
                 "--dataset", "nolog", "--to-files", d]) == 0
    treatments = pq.read_table(f"{d}/treatments.parquet")
    pq.write_table(treatments.drop(["propensity"]), f"{d}/treatments.parquet")
    conf, spec_file = f"{d}/conf.yaml", f"{d}/spec.yaml"
    assert main(["load", "--dataset", "nolog", "--observations", f"{d}/observations.parquet",
                 "--treatments", f"{d}/treatments.parquet", "--outcomes",
                 f"{d}/outcomes.parquet"]) == 0, capsys.readouterr()
    capsys.readouterr()
    assert main(["ingest", "--dataset", "nolog", "--conf", conf, "--json"]) == 0
    ingest = json.loads(capsys.readouterr().out)
    assert ingest["operator_only"]["rejected"].get("treatments", {}) == {}  # none lost
    assert main(["stats", "--dataset", "nolog", "--conf", conf, "--spec", spec_file]) == 0
    capsys.readouterr()
    assert main(["query", "--json", "--operator",
                 "SELECT count(*) AS n, count(behavior_prob) AS logged FROM nolog__transitions"]
                ) == 0
    rows = json.loads(capsys.readouterr().out)["rows"][0]
    assert rows["n"] > 4000 and rows["logged"] == 0  # carried as null, never made up
    spec = api.load_spec(spec_file)
    qspec = state_action_spec(spec)
    assert main(["query", "--json", "--operator",
                 "SELECT DISTINCT spec_id FROM nolog__trajectory_stats"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == [{"spec_id": qspec.spec_id}]
    assert main(["budget", "set", "--dataset", "nolog", "--epsilon", "20", "--delta", "1e-5"]) == 0
    capsys.readouterr()
    assert main(["evaluate", "--dataset", "nolog", "--conf", conf, "--spec", spec_file,
                 "--epsilon", "10", "--delta", "1e-6", "--json"]) == 0, capsys.readouterr()
    out = json.loads(capsys.readouterr().out)
    truth = json.loads((tmp_path / d / "truth.json").read_text())["values"]
    got = out["reference_values"]
    assert set(got) == set(truth)
    err = max(abs(got[k] - truth[k]) for k in truth)
    assert err < 0.1, (got, truth)
    # the policy value rows without a logged ratio: each covers its stated estimand
    from gpope.core.envs.registry import random_mdp_of
    from gpope.core.policy_value_direct import ESTIMANDS

    mdp = random_mdp_of("random_mdp/7")
    S, g = mdp.n_states, mdp.config.gamma
    j_target = float(mdp.start @ mdp.values())
    P_mu = np.einsum("sa,sat->st", mdp.behaviour, mdp.P[:, :, :S])
    r_mu = np.einsum("sa,sa->s", mdp.behaviour, mdp.reward_mean)
    d, j_behaviour = mdp.start.copy(), 0.0
    for t in range(mdp.config.max_steps):
        j_behaviour += g ** t * float(d @ r_mu)
        d = d @ P_mu
    pv = out["policy_value"]
    for name, want_j, estimand in (("policy_value", j_target, "direct"),
                                   ("behaviour_value", j_behaviour, "behaviour"),
                                   ("policy_contrast", j_target - j_behaviour, "direct_contrast")):
        row = pv[name]
        assert row["estimand"] == ESTIMANDS[estimand], (name, row)
        assert row["lower"] <= want_j <= row["upper"], (name, row, want_j)
        assert row["upper"] - row["lower"] < 0.5, (name, row)  # informative, not the range
    # the ledger: the behaviour estimate's histogram and counts joined the default's five
    # Gaussian mechanisms and the policy value release in one composed event, with their
    # documented shares of one privacy loss, certified by PLD at the run's delta
    from gpope.config import load_config
    from gpope.core.behaviour_estimate import BehaviourSettings
    from gpope.core.untuned.release import UntunedSettings

    entry = PrivacyLedger(None, load_config(None)).entry("nolog", out["run_id"])
    assert entry.status == "released"
    stored = mechanism_from_json(entry.mechanism)
    mu2 = np.array([e.noise_multiplier ** -2 for e in _gaussian_leaves(stored.event)])
    u, b = UntunedSettings(), BehaviourSettings()
    q, r, p, ms = u.quantile_share, u.refine_share, u.probe_share, 0.1
    pv_share = load_config(None).evaluation.policy_value_share
    own = 1.0 - b.share - b.quantile_share - pv_share
    want = [own * q, own * u.statistics_share, own * q, own * r * (1 - ms), own * r * ms,
            own * p, b.quantile_share, b.share]
    np.testing.assert_allclose(mu2[:8] / mu2.sum(), want, rtol=1e-9)
    assert mu2[8:].sum() / mu2.sum() == pytest.approx(pv_share, rel=1e-9)
    pld = PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    assert pld.compose(stored.event).get_epsilon(1e-6) <= 10.0 * (1 + 1e-3)
