"""The command line's edges, without Spark: suggestions, negative numbers, flag names in
messages, which commands offer --tracking-uri, progress bars only on a terminal."""

from __future__ import annotations

import argparse
import io

import pytest

from gpope.cli import build_parser, main, user_message
from gpope.cli._common import show_progress


def test_mistyped_subcommands_get_a_suggestion(capsys):
    for argv, suggestion in ((["evalute"], "'evaluate'"), (["budget", "shw"], "'show'")):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        assert f"did you mean {suggestion}?" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["zzzzzz"])
    assert "did you mean" not in capsys.readouterr().err  # nothing close: no guess


def test_negative_delta_is_parsed_then_refused_naming_the_flag(capsys):
    argv = ["evaluate", "--dataset", "d", "--spec", "conf/specs/chain.yaml", "--epsilon", "1",
            "--delta", "-1e-5"]
    assert build_parser().parse_args(argv).delta == -1e-5
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.strip() == "gpope evaluate: error: --delta must be > 0.0. Got -1e-05 instead."
    assert main([*argv[:-1], "1e-5", "--iterations", "0"]) == 2
    assert "--iterations must be >= 1" in capsys.readouterr().err
    assert build_parser().parse_args([*argv[:-1], "1e-5", "--ssp-clip-quantile", "0.7"]
                                     ).ssp_clip_quantile == 0.7
    assert main([*argv[:-1], "1e-5", "--ssp-clip-quantile", "1.5"]) == 2  # before any Spark
    assert "--ssp-clip-quantile must be <= 1" in capsys.readouterr().err


def test_internal_class_names_become_flags_or_settings():
    parser = argparse.ArgumentParser()
    parser.add_argument("--step-size", dest="step_size")
    msg = "The 'step_size' parameter of RunSettings must be > 0. Got -1 instead."
    assert user_message(msg, parser) == "--step-size must be > 0. Got -1 instead."
    assert user_message("The 'gamma' parameter of EvaluationSpec must be <= 1.", parser) == (
        "The spec's 'gamma' must be <= 1.")
    assert "GPOPEConfig" not in user_message("The 'clip' parameter of GPOPEConfig x", parser)


def test_only_commands_that_log_to_mlflow_offer_tracking_uri():
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    def flags(parser):
        return {o for a in parser._actions for o in a.option_strings}
    for name in ("evaluate", "demo"):
        assert "--tracking-uri" in flags(sub.choices[name])
    for name in ("simulate", "ingest", "stats", "query"):
        assert "--tracking-uri" not in flags(sub.choices[name])


def test_only_commands_that_start_spark_offer_remote():
    """--remote (a Spark Connect URL) only where a Spark session is used; the JVM-free commands
    (budget, query, maintain) take the lake options they read and nothing else."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))

    def flags(parser):
        return {o for a in parser._actions for o in a.option_strings if a.help != argparse.SUPPRESS}

    for name in ("simulate", "ingest", "stats", "evaluate", "demo"):
        assert "--remote" in flags(sub.choices[name])
    budget = next(a for a in sub.choices["budget"]._actions
                  if isinstance(a, argparse._SubParsersAction))
    jvm_free = [sub.choices["query"], sub.choices["maintain"], *budget.choices.values()]
    for parser in jvm_free:
        assert flags(parser) & {"--remote", "--tracking-uri"} == set(), parser.prog
        assert {"--lake", "--conf"} <= flags(parser), parser.prog


def test_progress_bars_only_on_a_terminal(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert not show_progress(argparse.Namespace(json=False, no_progress=False))
    monkeypatch.setattr("sys.stderr", Tty())
    assert show_progress(argparse.Namespace(json=False, no_progress=False))
    assert not show_progress(argparse.Namespace(json=True, no_progress=False))
    assert not show_progress(argparse.Namespace(json=False, no_progress=True))


_REFUSED = r"""
import json, os, sys, time
import pyarrow as pa
from deltalake import write_deltalake
from gpope.cli import main
lake, spec = sys.argv[1], sys.argv[2]
write_deltalake(f"{lake}/gold/other/trajectory_stats",
                pa.table({"spec_id": ["not_this_spec"], "traj_index": [0]}), partition_by=["spec_id"])
files = os.path.join(os.path.dirname(lake), "files")
os.makedirs(files)
import pyarrow.parquet as pq
pq.write_table(pa.table({"patient_id": ["p"], "time": ["t"], "reward": [1.0]}), f"{files}/out.parquet")
os.makedirs(f"{files}/obs")
pq.write_table(pa.table({"patient_id": ["p"], "time": ["t"], "variable": ["v"], "value": [1.0]}),
               f"{files}/obs/part-0.parquet")
pq.write_table(pa.table({"patient_id": [1.0], "time": ["t"], "action": ["a"]}),
               f"{files}/tx_float_ids.parquet")
with open(f"{files}/tx.csv", "w") as fh:
    fh.write("patient_id,time,action\n")
load = ["load", "--dataset", "d", "--lake", lake, "--outcomes", f"{files}/out.parquet"]
cases = [
    ["simulate", "--domain", "chain", "--patients", "5", "--dataset", "bad name", "--lake", lake],
    ["simulate", "--domain", "chain", "--patients", "5", "--dataset", "d",
     "--lake", os.path.join(os.path.dirname(lake), "ward[1]", "lake")],
    ["ingest", "--dataset", "nope", "--domain", "chain", "--lake", lake],
    ["stats", "--dataset", "nope", "--spec", spec, "--lake", lake],
    ["evaluate", "--dataset", "nope", "--spec", spec, "--epsilon", "1", "--delta", "1e-5",
     "--lake", lake],
    ["evaluate", "--dataset", "other", "--spec", spec, "--epsilon", "1", "--delta", "1e-5",
     "--lake", lake],
    ["demo", "--dataset", "x y", "--lake", lake],
    [*load, "--observations", f"{files}/missing.parquet", "--treatments", f"{files}/tx.csv"],
    [*load, "--observations", f"{files}/out.parquet", "--treatments", f"{files}/out.parquet"],
    [*load, "--observations", f"{files}/out.parquet", "--treatments", f"{files}/tx.csv",
     "--dataset", "a-b"],
    [*load, "--observations", f"{files}/obs", "--treatments", f"{files}/tx_float_ids.parquet"],
    [*load, "--observations", f"{files}/obs", "--treatments", f"{files}/tx.csv",
     "--columns", "patient_id=mrn,score=reward"],
    [*load, "--observations", f"{files}/obs", "--treatments", f"{files}/tx.csv",
     "--columns", "propensity=p_logged"],
]
out = []
for argv in cases:
    start = time.perf_counter()
    rc = main(argv)
    out.append({"rc": rc, "seconds": time.perf_counter() - start})
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("pyspark", "py4j"))
print("RESULT", json.dumps({"cases": out, "loaded": loaded}))
"""


def test_refused_pipeline_commands_fail_before_starting_spark(tmp_path):
    # Each command is refused for its arguments, its lake path or a missing input table in
    # well under a second, with no pyspark import and so no JVM (a Spark start costs 27-37 s).
    import json
    import subprocess
    import sys
    from pathlib import Path

    spec = Path(__file__).resolve().parents[2] / "conf" / "specs" / "chain.yaml"
    lake = tmp_path / "lake"
    out = subprocess.run([sys.executable, "-c", _REFUSED, str(lake), str(spec)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.split("RESULT ", 1)[1])
    assert result["loaded"] == []
    assert [c["rc"] for c in result["cases"]] == [2] * 13, out.stderr
    assert max(c["seconds"] for c in result["cases"]) < 5
    err = out.stderr
    for needle in ("'dataset' name", "'['", "bronze/nope/observations does not exist",
                   "silver/nope/transitions does not exist", "gold/nope/trajectory_stats does not",
                   "no statistics for spec 'chain'", "'x y'",
                   "observations file", "missing.parquet' does not exist",
                   "lacks the column(s) ['variable', 'value']", "'a-b'",
                   "tx_float_ids.parquet: column 'patient_id' (bronze patient_id) has Parquet type double",
                   "'score' is not a column of the bronze contract",
                   "has no column(s) ['p_logged'] named in --columns"):
        assert needle in err, needle


def test_print_private_diagnostics_implies_computing_them():
    # alone it printed nothing: the diagnostics are computed only under --private-diagnostics
    from gpope.cli import build_parser
    from gpope.cli.evaluate import settings_from_args

    common = ["evaluate", "--dataset", "icu", "--spec", "s.yaml", "--epsilon", "1", "--delta",
              "1e-6"]
    args = build_parser().parse_args([*common, "--json", "--print-private-diagnostics"])
    assert settings_from_args(args)["private_diagnostics"] is True
    assert "private_diagnostics" not in settings_from_args(build_parser().parse_args(common))
