"""The interval defaults of `gpope evaluate`: command line > the spec's evaluation: block > conf,
for the SSP clip quantile and the disjoint-groups rule (public m and m epsilon thresholds)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gpope.config import load_config
from gpope.core.evaluation.settings import RunSettings, SettingsLayer, resolve_settings
from gpope.errors import ConfigError
from gpope.shell.pipeline.jobargs import load_spec

REPO = Path(__file__).resolve().parents[2]
CHAIN = load_spec(str(REPO / "conf" / "specs" / "chain.yaml"))
CONF = load_config(None).evaluation


def _resolve(m: int, epsilon: float, spec=CHAIN, settings=CONF, **given):
    return resolve_settings(settings, spec, SettingsLayer.of(epsilon=epsilon, delta=1e-7, **given),
                            m=m)


def test_the_chain_spec_sets_the_quantile_and_the_groups_rule_chosen_on_public_studies():
    out, info = _resolve(50000, 1.0)
    assert (out.ssp_clip_quantile, out.interval_groups) == (0.5, 3)
    assert info["source"]["ssp_clip_quantile"] == info["source"]["interval_groups"] == "spec"
    assert info["interval_note"] is None
    assert {"ssp_clip_quantile", "interval_groups"} <= set(CHAIN.evaluation.intervals_provenance)
    # below a public threshold: the hull, and the run says why
    for m, epsilon, why in [(100000, 0.1, "m epsilon"), (10000, 10.0, "m = 10000")]:
        out, info = _resolve(m, epsilon)
        assert out.interval_groups == 0 and out.ssp_clip_quantile == 0.5
        assert why in info["interval_note"] and "hull" in info["interval_note"]


def test_flags_override_the_spec_and_an_explicit_k_is_used_as_given():
    out, info = _resolve(50000, 1.0, interval_groups=0, ssp_clip_quantile=0.9)
    assert (out.ssp_clip_quantile, out.interval_groups) == (0.9, 0)
    assert info["source"]["interval_groups"] == "options" and info["interval_note"] is None
    out, _ = _resolve(1000, 1.0, interval_groups=5)  # far below the spec's thresholds
    assert out.interval_groups == 5


def test_the_default_rule_yields_where_groups_do_not_hold():
    for given, word in [({"sampling": "uniform"}, "sampling"), ({"tune": "private"}, "tuning")]:
        out, info = _resolve(50000, 1.0, **given)
        assert out.interval_groups == 0 and word in info["interval_note"]
    out, info = _resolve(50000, 1.0, estimator="ssp")  # an ssp run's interval is its own
    assert out.interval_groups == 0 and info["interval_note"] is None


def test_without_spec_settings_the_conf_layer_applies_with_its_own_thresholds():
    from gpope.core.gpope.operating import INTERVAL_KEYS

    block = CHAIN.evaluation  # the spec's layer without its interval settings
    plain = dataclasses.replace(CHAIN, evaluation=dataclasses.replace(
        block, values={k: v for k, v in block.values.items() if k not in INTERVAL_KEYS},
        intervals_provenance={}))
    out, info = _resolve(50000, 1.0, spec=plain)
    assert (out.ssp_clip_quantile, out.interval_groups) == (0.99, 0)  # conf/default.yaml
    assert info["source"]["interval_groups"] == "conf"
    conf = dataclasses.replace(CONF, interval_groups=4, interval_groups_min_patients=2000,
                               ssp_clip_quantile=0.8)
    assert _resolve(3000, 1.0, spec=plain, settings=conf)[0].interval_groups == 4
    out, info = _resolve(1000, 1.0, spec=plain, settings=conf)
    assert out.interval_groups == 0 and "interval_groups_min_patients = 2000" in info["interval_note"]
    assert out.ssp_clip_quantile == 0.8
    # the spec's rule wins over the conf's, thresholds included
    assert _resolve(3000, 1.0, settings=conf)[0].interval_groups == 0


def test_conf_thresholds_are_validated():
    with pytest.raises(ConfigError, match="interval_groups_min_patients"):
        RunSettings(interval_groups_min_patients=-1)
    with pytest.raises(ConfigError, match="interval_groups_min_m_epsilon"):
        RunSettings(interval_groups_min_m_epsilon=-0.5)
    with pytest.raises(ConfigError, match="ssp_clip_quantile"):
        SettingsLayer.of(epsilon=1.0, delta=1e-6, ssp_clip_quantile=2.0)


def test_the_identification_test_is_on_by_default_and_the_conf_can_turn_it_off():
    """evaluation.ssp_identification (conf/default.yaml: true) reaches the run's options and
    survives resolve; an operator's ``false`` turns it off; anything but a bool is refused."""
    out, _ = _resolve(10000, 1.0)
    assert CONF.ssp_identification is True and out.ssp_identification is True
    off = dataclasses.replace(CONF, ssp_identification=False)
    out, _ = _resolve(10000, 1.0, settings=off)
    assert out.ssp_identification is False
    with pytest.raises(ConfigError, match="ssp_identification"):
        load_config(None, evaluation={"ssp_identification": "yes"})
    with pytest.raises(ConfigError, match="ssp_identification"):
        SettingsLayer.of(epsilon=1.0, delta=1e-7, ssp_identification=1)
