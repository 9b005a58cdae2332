"""The accountants: one interface, one registry that the CLI, the settings and the core read.

An accountant is described by an :class:`AccountantInfo` (cheap to import, so the command line
and the configuration read it without loading dp-accounting) and implemented by a
:class:`PrivacyAccountant`, loaded on first use. The ``--accountant`` choices and help, the
settings' constraint, ``"auto"``, the refusal of accountants that are not valid bounds, the
secure-noise check and the ledger's charge all read it. Adding an accountant is its own module
plus one entry in :data:`_REGISTERED` (or one :func:`register` call).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from gpope.errors import AccountingError, ConfigError

__all__ = ["AUTO", "REFERENCE", "SAMPLINGS", "AccountantInfo", "Certificate", "PrivacyAccountant",
           "RunShape", "accountant_choices", "accountant_help", "accountant_info",
           "accountant_names", "composing_accountants", "implementation", "not_a_valid_bound",
           "register", "resolve_accountant", "supported_pairs", "unregister"]

#: The name that resolves to the tightest rigorous accountant for the sampling.
AUTO = "auto"
#: The rigorous accountant that covers every sampling and composes any event: it charges runs of
#: an accountant that is not a valid bound, and brackets the calibrations of the tighter ones.
REFERENCE = "rdp"
SAMPLINGS: tuple[str, ...] = ("uniform", "poisson")


@dataclass(frozen=True)
class RunShape:
    """The public shape of one GPOPE run that an accountant certifies (inputs validated): m, N,
    the target delta, the sampling and its Poisson rate (None for uniform), and the PLD grid rule.
    """

    m: int
    iterations: int
    delta: float
    sampling: str
    batch_rate: float | None
    pld_grid: Any


@dataclass(frozen=True)
class Certificate:
    """What certifies a noise multiplier: the epsilon reported, by which bound, why a fallback
    stood in (``""`` if none), and the PLD grid (None unless ``certified_by`` is "pld")."""

    epsilon: float
    certified_by: str
    note: str = ""
    interval: float | None = None


@runtime_checkable
class PrivacyAccountant(Protocol):
    """The computations of one accountant (inputs already validated by the public entry points).

    Guarantee every implementation keeps: ``certify(run, calibrate(run, e)).epsilon <= e`` and
    ``epsilon(run, s) == certify(run, s).epsilon``.
    """

    def epsilon(self, run: RunShape, sigma: float) -> float:
        """Epsilon of ``SelfComposedDpEvent(step, N)`` at noise multiplier ``sigma``."""

    def certify(self, run: RunShape, sigma: float) -> Certificate:
        """:meth:`epsilon` with the bound that certifies it."""

    def calibrate(self, run: RunShape, epsilon: float) -> float:
        """A noise multiplier whose certified epsilon is at most ``epsilon``."""

    def event_epsilon(self, event: Any, delta: float, relation: Any) -> float:
        """Epsilon at ``delta`` of any composed dp-accounting ``event`` under ``relation``."""


@dataclass(frozen=True)
class AccountantInfo:
    """One registered accountant: its name, ``--help`` text, the samplings it covers and where it is
    implemented (a :class:`PrivacyAccountant`, or ``"module:attribute"`` loaded on first use).
    ``rigorous`` False: not a valid bound, refused for a release unless ``allow_invalid_accounting``
    and charged :data:`REFERENCE` by the ledger. ``discrete_gaussian``: its bound also covers
    ``--secure-noise``. ``composes_events``: :meth:`PrivacyAccountant.event_epsilon` is available.
    ``"auto"`` takes the covering rigorous one of highest ``preference``. ``limitation``,
    ``caveat`` and ``limitation_of_bound`` are the texts of its refusal, of a note beside its
    results and of why it is not a valid bound."""

    name: str
    description: str
    samplings: tuple[str, ...]
    rigorous: bool
    discrete_gaussian: bool = False
    composes_events: bool = False
    preference: int = 0
    limitation: str = "no bound is implemented for it"
    caveat: str = ""
    limitation_of_bound: str = ""
    implementation: Any = None

    def __post_init__(self) -> None:
        if not self.name or self.name == AUTO:
            raise ConfigError(f"An accountant cannot be named {self.name!r}; choose another name.")
        unknown = sorted(set(self.samplings) - set(SAMPLINGS))
        if not self.samplings or unknown:
            raise ConfigError(
                f"Accountant {self.name!r} lists samplings {self.samplings!r}; give a non-empty "
                f"subset of {SAMPLINGS}.")


#: The registered accountants, one entry each, in the order ``--help`` lists them.
_REGISTERED: dict[str, AccountantInfo] = {info.name: info for info in (
    AccountantInfo(
        name="rdp", samplings=("uniform", "poisson"), rigorous=True, discrete_gaussian=True,
        composes_events=True, preference=1, implementation="gpope.core.accounting.rdp:ACCOUNTANT",
        description="Renyi DP via dp-accounting (rigorous; uniform or poisson sampling)"),
    AccountantInfo(
        name="pld", samplings=("poisson",), rigorous=True, composes_events=True, preference=2,
        implementation="gpope.core.accounting.pld_accountant:ACCOUNTANT",
        limitation="dp-accounting's PLD accountant does not support sampling without replacement",
        description="privacy loss distributions, adaptive grid, min with RDP (rigorous; poisson)"),
    AccountantInfo(
        name="paper", samplings=("uniform",), rigorous=False,
        implementation="gpope.core.accounting.paper:ACCOUNTANT",
        limitation="the paper's Lemma 1 is stated for one trajectory per step",
        caveat="paper formula: not a valid bound, reproduction only",
        limitation_of_bound="the paper's formula drops terms: at its settings the true epsilon "
        "is several times larger",
        description="the paper's Lemma 1 used literally: NOT a valid bound (reproduction only)"),
)}
_LOADED: dict[str, PrivacyAccountant] = {}


def register(info: AccountantInfo) -> None:
    """Add an accountant (its name becomes a valid ``--accountant`` choice and setting).

    Raises:
        ConfigError: the name is taken.
    """
    if info.name in _REGISTERED:
        raise ConfigError(f"An accountant named {info.name!r} is already registered.")
    _REGISTERED[info.name] = info


def unregister(name: str) -> None:
    """Remove an accountant added by :func:`register` (tests)."""
    _REGISTERED.pop(name, None)
    _LOADED.pop(name, None)


def accountant_names() -> tuple[str, ...]:
    """The registered accountants' names (without ``"auto"``)."""
    return tuple(_REGISTERED)


def accountant_choices() -> tuple[str, ...]:
    """Every valid ``accountant`` value: ``"auto"`` and the registered names."""
    return (AUTO, *_REGISTERED)


def accountant_info(name: str) -> AccountantInfo:
    """The registered accountant ``name`` (not ``"auto"``).

    Raises:
        ConfigError: an unknown name; the message lists the valid ones.
    """
    info = _REGISTERED.get(name)
    if info is None:
        raise ConfigError(
            f"Unknown accountant {name!r}; valid accountants: {', '.join(accountant_choices())}.")
    return info


def not_a_valid_bound(name: str) -> bool:
    """Whether ``name`` is a registered accountant whose epsilon is not a valid upper bound
    (``"paper"``): refused for a release unless allowed, labelled NOT PRIVATE, charged a
    rigorous bound by the ledger. ``"auto"`` and other labels (e.g. the ledger's ``"-"``) are
    not such an accountant."""
    info = _REGISTERED.get(name)
    return info is not None and not info.rigorous


def composing_accountants() -> tuple[str, ...]:
    """The rigorous accountants that compose any dp-accounting event (composite releases)."""
    return tuple(i.name for i in _REGISTERED.values() if i.rigorous and i.composes_events)


def implementation(name: str) -> PrivacyAccountant:
    """The computations of the registered accountant ``name`` (loaded once)."""
    impl = _LOADED.get(name)
    if impl is None:
        target = accountant_info(name).implementation
        if isinstance(target, str):
            module, _, attr = target.partition(":")
            target = getattr(importlib.import_module(module), attr)
        impl = _LOADED[name] = target
    return impl


def supported_pairs() -> tuple[tuple[str, str], ...]:
    """Every (accountant, sampling) pair that can be answered, in registration order."""
    return tuple((info.name, s) for info in _REGISTERED.values() for s in SAMPLINGS
                 if s in info.samplings)


def resolve_accountant(accountant: str, sampling: str) -> str:
    """The concrete accountant for ``accountant`` under ``sampling``: ``"auto"`` becomes the
    rigorous one of highest ``preference`` covering the sampling (``"rdp"`` for uniform, ``"pld"``
    for Poisson); other names are returned once the pair is known to be supported.

    Raises:
        ConfigError: unknown accountant or sampling name.
        AccountingError: the pair is not supported; the message lists the supported pairs.
    """
    from gpope.core.validation import check_choice

    check_choice("resolve_accountant", "accountant", accountant, accountant_choices())
    check_choice("resolve_accountant", "sampling", sampling, SAMPLINGS)
    if accountant == AUTO:
        covering = [i for i in _REGISTERED.values() if i.rigorous and sampling in i.samplings]
        return max(covering, key=lambda i: i.preference).name
    info = _REGISTERED[accountant]
    if sampling not in info.samplings:
        pairs = ", ".join(f"{a}+{s}" for a, s in supported_pairs())
        raise AccountingError(
            f"The accountant {accountant!r} cannot account for sampling {sampling!r}: "
            f"{info.limitation}. Supported accountant+sampling pairs: {pairs} (or "
            "accountant='auto'). Choose one of those."
        )
    return accountant


def accountant_help() -> str:
    """The ``--accountant`` help text: "auto" and every registered accountant's description."""
    lines = [f"{AUTO}: the tightest rigorous one for the sampling"]
    lines += [f"{i.name}: {i.description}" for i in _REGISTERED.values()]
    return "; ".join(lines)
