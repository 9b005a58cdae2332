"""The accountant registry: names and capabilities come from one place.

A test-only accountant (the plain Gaussian mechanism composed by basic composition: N steps at
epsilon_1 each, valid for any sampling because subsampling only helps) is registered by one
:func:`register` call; the command line's choices and help, the settings' constraint, ``"auto"``,
the public entry points and the refusal of invalid bounds pick it up with no other change.
"""

from __future__ import annotations

import argparse
import math

import pytest

from gpope.core.accounting import calibrate_sigma, epsilon_spent, resolve_accountant
from gpope.core.accounting.registry import (
    AccountantInfo,
    Certificate,
    PrivacyAccountant,
    RunShape,
    accountant_choices,
    implementation,
    not_a_valid_bound,
    register,
    supported_pairs,
    unregister,
)
from gpope.core.evaluation.constraints import check_setting
from gpope.core.evaluation.settings import RunSettings, check_combination
from gpope.errors import AccountingError, ConfigError


def _gaussian_epsilon(sigma: float, delta: float) -> float:
    """Classic Gaussian mechanism (Dwork-Roth Thm A.1 form): eps with sigma = sqrt(2 ln(1.25/d))/eps."""
    return math.sqrt(2.0 * math.log(1.25 / delta)) / sigma


class BasicComposition:
    """N Gaussian steps, each at delta / N, composed by basic composition (a valid, loose bound)."""

    def epsilon(self, run: RunShape, sigma: float) -> float:
        return run.iterations * _gaussian_epsilon(sigma, run.delta / run.iterations)

    def certify(self, run: RunShape, sigma: float) -> Certificate:
        return Certificate(self.epsilon(run, sigma), "basic-test")

    def calibrate(self, run: RunShape, epsilon: float) -> float:
        return math.nextafter(run.iterations * _gaussian_epsilon(epsilon, run.delta / run.iterations),
                              math.inf)

    def event_epsilon(self, event, delta, relation):  # pragma: no cover - not composable
        raise AccountingError("basic-test composes no events")


@pytest.fixture
def basic_test():
    info = AccountantInfo(name="basic-test", samplings=("uniform", "poisson"), rigorous=True,
                          description="basic composition of Gaussian steps (test only)",
                          implementation=BasicComposition())
    register(info)  # the one registration line
    yield info
    unregister("basic-test")


def test_registered_accountant_is_a_choice_of_every_reader(basic_test):
    from gpope.cli import build_parser

    assert "basic-test" in accountant_choices()
    assert isinstance(implementation("basic-test"), PrivacyAccountant)
    # the command line: gpope evaluate, gpope tune and gpope accountant accept it
    parser = build_parser()
    args = parser.parse_args(["evaluate", "--dataset", "d", "--spec", "s.yaml", "--epsilon", "1",
                              "--delta", "1e-6", "--accountant", "basic-test"])
    assert args.accountant == "basic-test"
    args = parser.parse_args(["accountant", "epsilon", "--m", "100", "-N", "10", "--sigma", "2",
                              "--accountant", "basic-test"])
    assert args.accountant == "basic-test"
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert "basic composition of Gaussian steps" in " ".join(
        sub.choices["evaluate"].format_help().split())
    # the configuration and spec constraint, the settings type, the combination check
    assert check_setting("RunSettings", "accountant", "basic-test") == "basic-test"
    check_combination(RunSettings(accountant="basic-test"))
    # auto keeps the tightest rigorous accountant (the test one has the lowest preference)
    assert resolve_accountant("auto", "poisson") == "pld"
    assert ("basic-test", "uniform") in supported_pairs()
    assert not not_a_valid_bound("basic-test")


def test_registered_accountant_answers_through_the_public_entry_points(basic_test):
    kw = dict(m=1000, iterations=10, delta=1e-6, sampling="poisson", batch_rate=0.01)
    sigma = calibrate_sigma(epsilon=2.0, accountant="basic-test", **kw)
    # the closed form of basic composition, independent of the registry
    assert sigma == pytest.approx(10 * math.sqrt(2 * math.log(1.25e7)) / 2.0, rel=1e-12)
    assert epsilon_spent(sigma=sigma, accountant="basic-test", **kw) <= 2.0
    # looser than RDP for the same run: RDP needs less noise
    assert calibrate_sigma(epsilon=2.0, accountant="rdp", **kw) < sigma


def test_unregistered_names_are_refused_everywhere():
    with pytest.raises(ConfigError, match="'accountant' parameter of RunSettings"):
        RunSettings(accountant="basic-test")
    with pytest.raises(ConfigError, match="basic-test"):
        epsilon_spent(m=10, iterations=1, sigma=1.0, delta=1e-6, accountant="basic-test")
    from gpope.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["accountant", "epsilon", "--m", "100", "-N", "10", "--sigma",
                                   "2", "--accountant", "basic-test"])


def test_an_invalid_bound_is_refused_by_its_registry_entry():
    assert not_a_valid_bound("paper") and not not_a_valid_bound("auto")
    assert not not_a_valid_bound("-")  # a ledger label, not an accountant
    with pytest.raises(ConfigError, match="'paper' accountant is not a valid privacy bound"):
        check_combination(RunSettings(accountant="paper"))
    check_combination(RunSettings(accountant="paper", allow_invalid_accounting=True))


def test_registration_refuses_taken_and_reserved_names():
    with pytest.raises(ConfigError, match="already registered"):
        register(AccountantInfo(name="rdp", samplings=("uniform",), rigorous=True,
                                description="x"))
    with pytest.raises(ConfigError, match="cannot be named"):
        AccountantInfo(name="auto", samplings=("uniform",), rigorous=True, description="x")
    with pytest.raises(AccountingError, match="pld\\+poisson"):
        resolve_accountant("pld", "uniform")
