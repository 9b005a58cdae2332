"""The ``gpope accountant`` command against the library functions it wraps."""

from __future__ import annotations

import json

import pytest

from gpope.cli import main
from gpope.core.accounting import calibrate_sigma, epsilon_spent


def _run_json(capsys, argv: list[str]) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_calibrate_json(capsys):
    out = _run_json(capsys, ["accountant", "calibrate", "--m", "1e3", "--iterations", "500",
                             "--epsilon", "1.0", "--sampling", "poisson", "--accountant", "rdp",
                             "--json"])
    expected = calibrate_sigma(m=1000, iterations=500, epsilon=1.0, delta=1e-5,
                               accountant="rdp", sampling="poisson", batch_rate=1e-3)
    assert out["sigma"] == pytest.approx(expected, rel=1e-12)
    assert out["accountant"] == "rdp"
    assert out["batch_rate"] == pytest.approx(1e-3)


def test_epsilon_json_paper_is_labelled(capsys):
    out = _run_json(capsys, ["accountant", "epsilon", "--m", "10000", "-N", "10000",
                             "--sigma", "1.14", "--accountant", "paper", "--json"])
    assert out["epsilon"] == pytest.approx(
        epsilon_spent(m=10**4, iterations=10**4, sigma=1.14, delta=1e-5, accountant="paper"),
        rel=1e-12,
    )
    assert "not a valid bound" in out["note"]


def test_epsilon_text(capsys):
    assert main(["accountant", "epsilon", "--m", "100", "-N", "50", "--sigma", "3",
                 "--sampling", "poisson", "--batch-rate", "0.05", "--accountant", "rdp"]) == 0
    expected = epsilon_spent(m=100, iterations=50, sigma=3.0, delta=1e-5, accountant="rdp",
                             sampling="poisson", batch_rate=0.05)
    assert f"{expected:.6g}" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["--sigma", "-1"], "The 'sigma' setting must be > 0.0. Got -1.0 instead."),
        (["--sigma", "1", "--accountant", "pld"], "cannot account for sampling 'uniform'"),
        (["--sigma", "1", "--batch-rate", "0.1"], "The 'batch_rate' setting must be None for sampling='uniform'"),
    ],
)
def test_bad_argument_exits_nonzero_with_one_line(capsys, argv, reason):
    code = main(["accountant", "epsilon", "--m", "100", "-N", "10", *argv])
    assert code != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert reason in err
