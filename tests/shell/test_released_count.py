"""The released number of patients m~ on a real local lake (delta-rs, no JVM): released once per
(dataset, statistics version) and charged once in the ledger, reused without a further charge,
a new statistics version gets a new count, a budget that cannot pay refuses it."""

from __future__ import annotations

import dp_accounting
import pytest
from deltalake import DeltaTable
from dp_accounting.rdp import RdpAccountant

from gpope.config import load_config
from gpope.core.accounting.composition import mechanism_from_json
from gpope.core.accounting.rdp import RDP_ORDERS
from gpope.errors import BudgetExceededError
from gpope.shell.pipeline.ledger import PrivacyLedger
from gpope.shell.pipeline.released_count import public_count


def _ledger_rows(config, dataset="d"):
    return [e for e in PrivacyLedger(None, config).status(dataset).counted]


def test_a_count_is_charged_once_per_statistics_version_and_reused(tmp_path):
    config = load_config(None, lake={"root": str(tmp_path)})
    first = public_count(config, dataset="d", stats_version=3, m=2000)
    again = public_count(config, dataset="d", stats_version=3, m=2000)
    assert again == first and first.private
    counted = _ledger_rows(config)
    assert len(counted) == 1 and counted[0].status == "released"
    stored = mechanism_from_json(counted[0].mechanism)
    assert stored.relation == "add_or_remove_one"
    # the stored event is the count's Gaussian, and dp-accounting certifies the charge for it
    acc = RdpAccountant(orders=list(RDP_ORDERS))
    acc.compose(stored.event)
    assert stored.event == dp_accounting.GaussianDpEvent(first.sigma)
    assert acc.get_epsilon(config.privacy.count_delta) <= config.privacy.count_epsilon * (1 + 1e-6)
    assert counted[0].epsilon == config.privacy.count_epsilon
    # a new `gpope stats` version is a new data set: a new count, a second charge
    public_count(config, dataset="d", stats_version=4, m=2001)
    assert len(_ledger_rows(config)) == 2
    table = DeltaTable(str(tmp_path / "gold" / "released_counts")).to_pyarrow_table().to_pylist()
    assert sorted(r["stats_version"] for r in table) == [3, 4]
    assert {r["run_id"] for r in table} == {e.run_id for e in _ledger_rows(config)}
    # a seeded count is reproducible, NOT private, never reused by a private run
    s1 = public_count(config, dataset="d", stats_version=5, m=2000, seed=1)
    s2 = public_count(config, dataset="d", stats_version=5, m=2000, seed=1)
    assert s1 == s2 and not s1.private and len(_ledger_rows(config)) == 4
    private = public_count(config, dataset="d", stats_version=5, m=2000)
    assert private.private and len(_ledger_rows(config)) == 5
    # once a private count exists, a seeded run uses it (public) and is charged nothing more
    assert public_count(config, dataset="d", stats_version=5, m=2000, seed=2) == private
    assert len(_ledger_rows(config)) == 5


def test_a_budget_that_cannot_pay_for_the_count_refuses_it_and_writes_nothing(tmp_path):
    config = load_config(None, lake={"root": str(tmp_path)}, privacy={"default_epsilon": 0.05})
    with pytest.raises(BudgetExceededError, match="Privacy budget of dataset 'd' exceeded"):
        public_count(config, dataset="d", stats_version=0, m=100)
    assert not (tmp_path / "gold" / "released_counts").exists()


def test_a_count_the_ledger_lost_is_found_in_the_lake_and_charged_again(tmp_path):
    """Removing gold/privacy_ledger does not forget a released count: the ledger refuses to
    state a budget until `gpope budget reconcile` charges it its recorded epsilon and delta."""
    import shutil

    from gpope.errors import ConfigError

    config = load_config(None, lake={"root": str(tmp_path)})
    count = public_count(config, dataset="d", stats_version=0, m=500)
    ledger = PrivacyLedger(None, config)
    run_id = ledger.status("d").counted[0].run_id
    shutil.rmtree(ledger.location)
    with pytest.raises(ConfigError, match=f"{run_id} \\(d, epsilon 0.1, in released_counts\\)"):
        PrivacyLedger(None, config).check_lake("d")  # what `budget show` and reserve run first
    PrivacyLedger(None, config).reconcile("d")
    (entry,) = PrivacyLedger(None, config).status("d").counted
    assert (entry.run_id, entry.epsilon, entry.delta) == (run_id, count.epsilon, count.delta)


def test_budget_show_lists_the_released_counts_beside_their_charge(tmp_path, capsys):
    """`gpope budget show` states each released m~ (public) with what it was charged, and the
    ledger row of that charge is the count's run."""
    import json

    from gpope.cli import main

    config = load_config(None, lake={"root": str(tmp_path)})
    count = public_count(config, dataset="d", stats_version=2, m=700)
    seeded = public_count(config, dataset="d", stats_version=3, m=700, seed=4)
    show = ["budget", "show", "--dataset", "d", "--lake", str(tmp_path)]
    assert main([*show, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    rows = shown["released_counts"]
    assert [(r["stats_version"], r["m_noisy"], r["private"]) for r in rows] == [
        (2, count.m_noisy, True), (3, seeded.m_noisy, False)]
    assert {r["run_id"] for r in rows} == {e.run_id for e in _ledger_rows(config)}
    assert rows[0]["noise_std"] == count.sigma and rows[0]["epsilon"] == count.epsilon
    assert main(show) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("m~")]
    assert lines[0].split()[1] == str(count.m_noisy) and "statistics version 2" in lines[0]
    assert "NOT private" in lines[1] and "NOT private" not in lines[0]
