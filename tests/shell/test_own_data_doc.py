"""docs/OWN_DATA.md's example runs exactly as written: files -> load -> ingest -> stats -> evaluate.

The commands are read from the page (between its ``own-data example`` markers), so the page and
this test cannot drift apart; they run in-process on the suite's Spark session, in a temp dir.
"""

from __future__ import annotations

import contextlib
import json
import shlex
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "OWN_DATA.md"


def documented_commands(example: str = "own-data example") -> list[list[str]]:
    """The ``gpope`` commands of the page's block between ``<!-- {example}: begin/end -->`` as
    argument lists (line continuations joined)."""
    text = DOC.read_text()
    block = text.split(f"<!-- {example}: begin -->", 1)[1]
    block = block.split(f"<!-- {example}: end -->", 1)[0]
    body = block.split("```bash", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    commands = [shlex.split(line) for line in body.splitlines() if line.strip()]
    assert commands and all(c[0] == "gpope" for c in commands), commands
    return [c[1:] for c in commands]


def test_the_documented_example_covers_the_whole_own_data_path():
    names = [c[0] for c in documented_commands()]
    assert names == ["simulate", "budget", "load", "ingest", "stats", "evaluate"]
    evaluate = documented_commands()[-1]
    # the command form, and no solver flags: the spec has no evaluation: block
    assert {"--dataset", "--spec", "--epsilon", "--delta"} <= set(evaluate)
    assert not {"--clip", "--step-size", "--ssp-clip", "--estimator", "--tune"} & set(evaluate)


#: A working directory whose name holds a space, accents, '#', '?', '%', braces, a comma and both
#: quotes (issue 28.1's combined hostile path): the example runs in it, so its files, the lake
#: under it and every Spark stage and JVM-free reader are exercised there.
_NASTY = "ward é #7 ?q=1 %zz {a,b} 'x\""


def _gaussian_leaves(event):
    """The Gaussian events a (nested) composed dp-accounting event is made of."""
    import dp_accounting

    if isinstance(event, dp_accounting.ComposedDpEvent):
        return [g for e in event.events for g in _gaussian_leaves(e)]
    assert isinstance(event, dp_accounting.GaussianDpEvent)
    return [event]


def _check_default_charge(entry, params, settings) -> None:
    """The ledger row of a default run (epsilon 1, delta 1e-6, the policy value's share 0.3)
    against oracles that are not the project's accountants: its stored event is six Gaussian
    mechanisms with the documented shares of one privacy loss mu^2, and the Gaussian
    mechanism's exact curve (Balle and Wang 2018, Thm. 8, the mu-GDP conversion) and
    dp-accounting's PLD both certify the charged epsilon at the run's delta, with at most 3 %
    left unused."""
    import math

    import dp_accounting
    import numpy as np
    from dp_accounting.pld import PLDAccountant
    from scipy.optimize import brentq
    from scipy.stats import norm

    from gpope.core.accounting.composition import mechanism_from_json

    assert entry.status == "released" and entry.charged_epsilon == entry.epsilon == 1.0
    assert entry.charged_delta == entry.delta == 1e-6
    stored = mechanism_from_json(entry.mechanism)
    assert stored.relation == "add_or_remove_one"
    sigmas = [e.noise_multiplier for e in _gaussian_leaves(stored.event)]
    mu2 = np.array([s**-2 for s in sigmas])
    q, r, p, ms, pv = (settings.quantile_share, settings.refine_share, settings.probe_share, 0.1,
                       0.3)
    own = 1.0 - pv  # [histogram, SSP sums, histogram, residual sum, moments, probe, policy value]
    shares = [own * q, own * settings.statistics_share, own * q, own * r * (1 - ms), own * r * ms,
              own * p, pv]
    np.testing.assert_allclose(mu2 / mu2.sum(), shares, rtol=1e-9)
    assert float(params["sigma"]) == pytest.approx(sigmas[1], rel=1e-12)  # the SSP sums' own
    mu = math.sqrt(mu2.sum())

    def gdp_delta(eps: float) -> float:
        return float(norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2))

    assert gdp_delta(entry.charged_epsilon) <= entry.delta * (1 + 1e-9)
    exact = brentq(lambda e: gdp_delta(e) - entry.delta, 0.0, 50.0)
    assert 0.97 * entry.epsilon <= exact <= entry.epsilon
    pld = PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
                        value_discretization_interval=1e-5)
    assert pld.compose(stored.event).get_epsilon(entry.delta) == pytest.approx(exact, abs=2e-3)


def test_documented_example_runs_as_written(spark, tmp_path, monkeypatch, capsys):
    # The page's commands, as written, in a hostile working directory (so `./lake` and the
    # files are under it); then the JVM-free readers (gpope query, budget show) see every row.
    # This one run is also the suite's whole-pipeline hostile-path check.
    from gpope import api
    from gpope.cli import main
    from gpope.config import load_config
    from gpope.shell.pipeline.simulate import SimulateOptions

    work = tmp_path / _NASTY
    work.mkdir()
    monkeypatch.chdir(work)
    # an SQLAlchemy URL cannot hold '?' or '#' in a file name: the MLflow store goes beside it
    # (its default artifact root still follows the hostile working directory)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    outputs = {}
    for argv in documented_commands():
        assert main(argv) == 0, (argv, capsys.readouterr())
        outputs[argv[0]] = capsys.readouterr().out
    assert "rows as delivered" in outputs["load"]
    # the files are as pandas writes them by default: nanosecond times
    import pyarrow.parquet as pq

    assert {pq.read_schema(work / "mydata" / f"{t}.parquet").field("time").type.unit
            for t in ("observations", "treatments", "outcomes")} == {"ns"}
    assert "episode ends: " in outputs["ingest"] and "WARNING" not in outputs["ingest"]
    spec = (work / "mydata" / "spec.yaml").read_text()
    assert "evaluation:" not in spec and "domain:" not in spec
    truth = json.loads((work / "mydata" / "truth.json").read_text())["values"]
    released = {line.split("=")[0].strip()[2:-1]: float(line.split("=")[1].split()[0])
                for line in outputs["evaluate"].splitlines() if line.strip().startswith("V(")}
    assert set(released) == set(truth)
    # the tuning-free default: values inside the range the spec's public bounds imply, each
    # with an interval
    assert "tuning-free private default" in outputs["evaluate"]
    # no GPOPE solver ran: no solver settings are printed
    assert "operating point" not in outputs["evaluate"] and "sampling" not in outputs["evaluate"]
    assert all(0.0 <= v for v in released.values()), outputs["evaluate"]
    assert outputs["evaluate"].count("95% interval") >= len(truth)
    assert "MLflow run " in outputs["evaluate"] and "WAS RELEASED" not in outputs["evaluate"]

    # a simulated cohort written straight into the same hostile lake (the driver-side writer)
    config = load_config(None, lake={"root": str(work / "lake")})
    api.simulate(spark, "sim", domain="chain", patients=3, seed=1, config=config,
                 options=SimulateOptions(n_steps=2))
    transitions = int(outputs["ingest"].split(" transitions (")[0].split()[-1])
    assert main(["query", "--json", "--operator",
                 "SELECT (SELECT count(*) FROM ward7__transitions) AS transitions, "
                 "(SELECT count(DISTINCT run_id) FROM latest_release) AS releases, "
                 "(SELECT count(*) FROM ward7__trajectory_stats) AS trajectories, "
                 "(SELECT count(*) FROM sim__treatments) AS simulated"]) == 0
    got = json.loads(capsys.readouterr().out)["rows"][0]
    assert got == {"transitions": transitions, "releases": 1, "trajectories": 1000,
                   "simulated": 6}
    assert main(["budget", "show", "--dataset", "ward7", "--json"]) == 0
    budget = json.loads(capsys.readouterr().out)
    # the run's epsilon 1 and the released count m~ it read (once per statistics version)
    count = config.privacy.count_epsilon
    assert budget["spent_basic"]["epsilon"] == pytest.approx(1.0 + count)
    assert [r["status"] for r in budget["runs"]] == ["released", "released"]

    # --estimator ssp on the same spec (no simulator) needs no --ssp-clip: its clip is a private
    # quantile, one histogram in the run's composed ledger event, and the output says so
    import dp_accounting
    from dp_accounting.pld import PLDAccountant

    from gpope.core.accounting.composition import mechanism_from_json
    from gpope.core.untuned.release import UntunedSettings
    from gpope.shell.pipeline.ledger import PrivacyLedger

    assert main([*documented_commands()[-1], "--estimator", "ssp", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["estimator"] == "ssp" and out["private"] is True and out["ssp_clip"] > 0
    assert out["settings"]["ssp_clip_from"].startswith("private 0.9 quantile")
    # that 0.9 is the conf's untuned.clip_quantile, and the provenance names every conf block
    assert {out["settings"]["source"][k] for k in ("untuned", "private_tuning", "policy_value")
            } == {"conf"}
    # MLflow holds the clip the run used and the quantile it read; the param is that quantile,
    # not the conf's 0.99 for public cohorts, which this run never read
    import mlflow

    from gpope.shell import mlflow_names as names

    run = mlflow.MlflowClient().get_run(out["mlflow_run_id"])
    assert run.data.metrics[names.METRIC_SSP_CLIP_USED] == pytest.approx(out["ssp_clip"])
    assert run.data.metrics[names.METRIC_SSP_CLIP_QUANTILE_USED] == pytest.approx(0.9)
    assert run.data.tags[names.SSP_CLIP_SOURCE] == "private"
    assert run.data.params["ssp_clip_quantile"] == "0.9"
    assert out["settings"]["ssp_clip_quantile"] == 0.9
    # and only the settings the ssp release used: none of GPOPE's, its clip histogram's share
    solver_only = {"passes", "iterations", "clip", "step_size", "sampling", "batch_rate"}
    assert not solver_only & (set(run.data.params) | set(out["settings"])), run.data.params
    assert out["iterations"] is None and out["sampling"] is None
    assert float(run.data.params["ssp_clip_share"]) == UntunedSettings().quantile_share
    # its values, their intervals and the policy value lie in the spec's public ranges
    from gpope import api as gapi
    from gpope.core.policy_value import spec_bounds
    from gpope.core.policy_value_release import public_ranges
    from gpope.core.untuned.release import value_range

    ssp_spec = gapi.load_spec(work / "mydata" / "spec.yaml")
    lo, hi = value_range(ssp_spec)
    ends = [*out["reference_values"].values(), *out["intervals"]["lower"],
            *out["intervals"]["upper"]]
    assert all(lo <= v <= hi for v in ends if v not in (float("inf"), float("-inf"))), out
    for name, (r_lo, r_hi) in public_ranges(spec_bounds(ssp_spec)).items():
        q = out["policy_value"][name]
        assert r_lo <= q["lower"] <= q["value"] <= q["upper"] <= r_hi, (name, q)
    # the tuning-free default's run likewise: its own rules, nothing of GPOPE's
    untuned_id = outputs["evaluate"].split("MLflow run ")[1].split()[0]
    untuned_run = mlflow.MlflowClient().get_run(untuned_id)
    untuned = untuned_run.data.params
    assert not solver_only & set(untuned) and "ssp_clip_quantile" not in untuned, untuned
    assert float(untuned["untuned.clip_quantile"]) == UntunedSettings().clip_quantile
    _check_default_charge(PrivacyLedger(None, config).entry(
        "ward7", untuned_run.data.tags["gpope.run_id"]), untuned, UntunedSettings())
    stored = mechanism_from_json(PrivacyLedger(None, config).entry("ward7", out["run_id"]).mechanism)
    assert "ssp clip(private 0.9 quantile of the statistics norms)" in stored.label
    histogram = stored.event.events[1]  # [ssp release, clip histogram, policy value]
    assert isinstance(histogram, dp_accounting.GaussianDpEvent)

    def pld_epsilon(event, delta):
        acc = PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
        return acc.compose(event).get_epsilon(delta)

    # one Gaussian mechanism calibrated to (1, 1e-6); the histogram takes its quantile_share of
    # that mechanism's privacy loss
    mu2 = [e.noise_multiplier**-2 for e in _gaussian_leaves(stored.event)]
    assert histogram.noise_multiplier**-2 / sum(mu2) == pytest.approx(
        UntunedSettings().quantile_share)
    assert 0.97 <= pld_epsilon(stored.event, 1e-6) <= 1.0 + 1e-3
    assert main(["budget", "show", "--dataset", "ward7", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["spent_basic"]["epsilon"] == pytest.approx(
        2.0 + count)

    # under --secure-noise the private clip's histogram takes the OS-CSPRNG sampler too
    from gpope.core.mechanisms import secure_noise
    drawn = []
    real = secure_noise.secure_gaussian_noise

    def counting(shape, *args, **kwargs):
        drawn.append(shape)
        return real(shape, *args, **kwargs)

    secure_noise.secure_gaussian_noise = counting
    try:
        assert main([*documented_commands()[-1], "--estimator", "ssp", "--secure-noise",
                     "--accountant", "rdp", "--json"]) == 0
    finally:
        secure_noise.secure_gaussian_noise = real
    out = json.loads(capsys.readouterr().out)
    assert out["ssp_clip"] > 0 and out["settings"]["ssp_clip_from"].startswith("private 0.9")
    from gpope import api
    from gpope.core.untuned.release import UntunedSettings, quantile_grid

    spec = api.load_spec(documented_commands()[-1][documented_commands()[-1].index("--spec") + 1])
    bins = len(quantile_grid(spec, UntunedSettings()).edges()) + 1
    assert drawn[0] in ((bins,), bins)  # the clip histogram is the first draw


def test_gpope_warnings_are_one_line_without_a_source_path(capsys):
    import warnings

    from gpope import cli

    before = warnings.showwarning
    with contextlib.suppress(SystemExit):  # --help exits after main() installed the hook
        cli.main(["accountant", "compare", "--help"])
    try:
        assert warnings.showwarning is cli._one_line_warning
        warnings.warn_explicit("delta is large", UserWarning,
                               "/x/gpope/shell/pipeline/evaluate.py", 196)
    finally:
        warnings.showwarning = before
    err = capsys.readouterr().err
    assert err == "WARNING: delta is large\n"


def test_the_default_applies_only_to_untuned_specs_without_explicit_choices():
    from gpope.core.envs.registry import random_mdp_of
    from gpope.core.estimators import get
    from gpope.core.spec import EvaluationSpec
    from gpope.shell.pipeline.jobargs import load_spec

    own = EvaluationSpec.from_mapping(random_mdp_of("random_mdp/7").spec_mapping("own"))
    def untuned_applies(spec, sources):
        return get("untuned").claims(spec.evaluation is not None, sources)

    assert untuned_applies(own, {"estimator": "conf", "clip": "conf", "epsilon": "options"})
    assert not untuned_applies(own, {"estimator": "options"})
    assert not untuned_applies(own, {"clip": "options"})
    assert not untuned_applies(load_spec("conf/specs/chain.yaml"), {})  # publicly tuned


def test_load_checks_the_same_columns_as_the_bronze_contract():
    # gpope load checks column names before Spark starts; they are the contract's names
    from gpope.shell.pipeline.load import BRONZE_COLUMNS
    from gpope.shell.schemas import TABLE_SCHEMAS

    assert {t: tuple(f.name for f in TABLE_SCHEMAS[t].fields) for t in BRONZE_COLUMNS} == \
        BRONZE_COLUMNS


def test_every_printed_advice_works_for_a_spec_without_a_simulator():
    # advice reachable from the own-data path names only commands and flags that work for a spec
    # without a 'domain': `gpope tune` needs a simulator, --statistics-share only helps gpope runs
    from gpope.core.envs.registry import random_mdp_of
    from gpope.core.estimators.base import generic_settings_note
    from gpope.core.guard import utility_guard
    from gpope.core.spec import EvaluationSpec
    from gpope.shell.evaluate.report import guard_remedy
    from gpope.shell.lake.names import TableRef, creator_hint
    from gpope.shell.pipeline.interval_notes import unbounded_note
    from gpope.shell.pipeline.jobargs import load_spec

    own = EvaluationSpec.from_mapping(random_mdp_of("random_mdp/7").spec_mapping("own"))
    assert own.domain is None
    inf = float("inf")
    printed = [
        generic_settings_note(own),
        utility_guard({"public": 1.5}, remedy=guard_remedy(own)).message,
        unbounded_note({"lower": [-inf], "upper": [inf], "unidentified": True, "separation": 0.4},
                       estimator="untuned"),
        unbounded_note({"lower": [-inf], "upper": [inf]}, estimator="untuned"),
    ]
    from gpope.errors import ConfigError
    from gpope.shell.pipeline.ssp import public_clip

    try:  # no public clip from such a spec (evaluate then releases a private one)
        public_clip(own, n_trajectories=100, quantile=0.99)
    except ConfigError as exc:
        printed.append(str(exc))
    assert "tuning-free private default" in printed[-1]
    printed.append(utility_guard({}, remedy=guard_remedy(own)).message)
    for line in printed:
        assert "gpope tune" not in line and "--statistics-share" not in line, line
        assert "\n" not in line
    assert "drop the estimator and solver flags" in printed[0]
    assert "gpope load --dataset ward7" in creator_hint(TableRef("bronze", "observations", "ward7"))
    # a spec with a simulator keeps the advice that works for it
    chain = load_spec("conf/specs/chain.yaml")
    assert "gpope tune --spec FILE" in generic_settings_note(chain)
    assert "gpope tune --spec FILE" in guard_remedy(chain)


def test_intervals_on_approximate_features_of_own_data_say_what_they_do_not_cover():
    # a Fourier map on continuous measurements has an approximation error no release measures
    # (the ICU trial of RESULTS: finite intervals 0.02 wide, 0.07 from the truth at epsilon 10)
    from gpope.core.envs.registry import random_mdp_of
    from gpope.core.spec import EvaluationSpec
    from gpope.shell.evaluate.report import approximation_note
    from gpope.shell.pipeline.jobargs import load_spec

    own = EvaluationSpec.from_mapping(random_mdp_of("random_mdp/7").spec_mapping("own"))
    assert approximation_note(own) is None                        # tabular: exact
    assert approximation_note(load_spec("conf/specs/hiv_demo.yaml")) is None   # a simulator
    icu = EvaluationSpec.from_mapping({
        "name": "icu", "gamma": 0.95, "normalization": "transition", "length_scale": 30,
        "feature_map": {"kind": "fourier", "order": 3, "low": [0.5, 40.0],
                        "high": [10.0, 110.0], "max_coupling": 1},
        "target_policy": {"kind": "uniform", "n_actions": 3},
        "reference_states": {"shock": [6.0, 52.0]}})
    note = approximation_note(icu)
    assert note.startswith("NOTE: the intervals cover") and "fourier feature map (7 features)" in note
    assert "not that map's approximation error" in note and "\n" not in note
    assert "## Reading the output" in DOC.read_text()


def test_a_release_of_theta_zero_is_called_no_better_than_zero_and_no_support_is_named():
    # at m = 1000 and epsilon 1 the documented example can release theta = 0 exactly: its
    # relative MSPBE is exactly 1 whatever the noise, so the guard says so instead of "cannot
    # tell"; intervals unbounded because no feature is supported say that, not "separation inf"
    from types import SimpleNamespace

    import numpy as np

    from gpope.core.envs.registry import random_mdp_of
    from gpope.core.spec import EvaluationSpec
    from gpope.shell.evaluate.report import _guard
    from gpope.shell.pipeline.interval_notes import NO_SUPPORT_NOTE, unbounded_note

    own = EvaluationSpec.from_mapping(random_mdp_of("random_mdp/7").spec_mapping("own"))
    zero = SimpleNamespace(theta=np.zeros(own.n_features), private_mspbe=None, noisy=None)
    guard, _ = _guard(None, zero, n=own.n_features, seed=None, spec=own)
    assert guard.verdict == "no_better_than_zero"
    assert "(the released theta is 0, exact relative MSPBE 1)" in guard.message
    some = SimpleNamespace(theta=np.full(own.n_features, 0.5), private_mspbe=None, noisy=None)
    assert _guard(None, some, n=own.n_features, seed=None, spec=own)[0].verdict == "unknown"
    inf = float("inf")
    note = unbounded_note({"lower": [-inf], "upper": [inf], "unidentified": True,
                           "separation": inf}, estimator="untuned")
    assert note == NO_SUPPORT_NOTE.replace(
        "more patients, a larger epsilon or a larger --statistics-share (gpope runs)",
        "more patients or a larger epsilon") and "separation" not in note


def test_the_continuous_measurements_template_reads_as_the_protocol_it_describes():
    # the YAML of 'Continuous measurements' is a valid spec body whose softmax protocol gives a
    # vasopressor below MAP 65 and fluids above lactate 4, as its comments say
    import numpy as np
    import yaml

    from gpope.core.spec import EvaluationSpec

    section = DOC.read_text().split("### Continuous measurements", 1)[1]
    body = yaml.safe_load(section.split("```yaml\n", 1)[1].split("```", 1)[0])
    spec = EvaluationSpec.from_mapping({"name": "icu", "gamma": 0.95,
                                        "normalization": "transition", "length_scale": 30, **body})
    assert spec.n_features == 7 and spec.reference_names == ("stable", "shock")
    probs = spec.target_policy.probabilities(np.array([[2.0, 50.0], [6.0, 90.0], [1.5, 80.0]]))
    assert probs.argmax(axis=1).tolist() == [2, 1, 0]


def test_the_ward_extract_example_runs_as_written(spark, tmp_path, monkeypatch, capsys):
    """OWN_DATA's ward extract (two discrete measurements, files as pandas writes them, no
    propensity column) goes from files to a release with the page's commands as written."""
    import pyarrow.parquet as pq
    import yaml

    from gpope.cli import main

    commands = documented_commands("own-data ward example")
    assert [c[0] for c in commands] == ["simulate", "budget", "load", "ingest", "stats",
                                        "evaluate", "query"]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    outputs = {}
    for argv in commands:
        assert main(argv) == 0, (argv, capsys.readouterr())
        outputs[argv[0]] = capsys.readouterr().out
    ward = tmp_path / "ward"
    observed = pq.read_table(ward / "observations.parquet")
    assert set(observed["variable"].to_pylist()) == {"lactate", "bp", "episode_end"}
    assert observed.schema.field("time").type.unit == "ns"  # df.to_parquet's default
    assert "propensity" not in pq.read_schema(ward / "treatments.parquet").names
    assert "propensity: not in the file, not logged" in outputs["load"]
    conf = yaml.safe_load((ward / "conf.yaml").read_text())
    assert conf["datasets"]["ward43"]["variables"] == ["lactate", "bp"]
    truth = json.loads((ward / "truth.json").read_text())
    # the page's spec excerpt is the generated spec's own form
    spec_text = (ward / "spec.yaml").read_text()
    assert "&id" not in spec_text  # written as an analyst writes it: no YAML anchors
    spec = yaml.safe_load(spec_text)
    assert spec["feature_map"] == {"kind": "tabular", "variables": {"lactate": 4, "bp": 4}}
    assert spec["reference_states"] == truth["states"]
    assert ", ".join(f"{k}: {v}" for k, v in truth["states"].items()) in DOC.read_text()
    evaluate = outputs["evaluate"]
    assert "the behaviour policy was estimated privately" in evaluate
    released = {line.split("=")[0].strip()[2:-1]: float(line.split("=")[1].split()[0])
                for line in evaluate.splitlines() if line.strip().startswith("V(")}
    assert set(released) == set(truth["values"])
    # the policy value rows are released without propensities too, named as the page names them
    for line in ("J(target) = ", "J(behaviour) = ", "J(target) - J(behaviour) = "):
        assert line in evaluate, evaluate
    for state in [*truth["values"], "policy_value", "behaviour_value", "policy_contrast"]:
        assert state in outputs["query"]  # the query answers with every released row
    # 'Reading the output' reads the same run's rows with their estimands, as written
    reading = documented_commands("own-data reading example")
    assert [c[0] for c in reading] == ["query", "query"] and reading[0][1] == "--describe"
    printed = []
    for argv in reading:
        assert main(argv) == 0, (argv, capsys.readouterr())
        printed.append(capsys.readouterr().out)
    described, listed = printed
    assert "estimand" in described and "tabular fixed point" in described
    for state in truth["values"]:  # each V row names the tabular fixed point
        line = next(x for x in listed.splitlines() if f" {state} " in f" {x} ")
        assert "tabular fixed point" in line, line
    for state in ("policy_value", "behaviour_value", "policy_contrast"):
        assert state in listed
    assert "mean recorded discounted return" in listed
