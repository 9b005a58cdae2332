"""The one registry of simulated domains: simulator, behaviour policy, episode cap, event layout.

Every part of gpope that simulates (``gpope simulate``, the public MSPBE cohort, ingest of a
simulated cohort, the jobs) asks :func:`get_domain`; nothing else names a domain. A domain is a
:class:`SimDomain` record; adding one is a module with its simulator plus one entry in
:data:`_BUILTIN` (or a family parser in :data:`_FAMILIES`).

| name | simulator | behaviour | episode cap |
|---|---|---|---|
| ``chain`` | :mod:`~gpope.core.envs.chain` | the only action | 1000 |
| ``mountaincar`` | :mod:`~gpope.core.envs.mountaincar` | Q-learned, epsilon-greedy 0.1 | 200 |
| ``hiv`` | :mod:`~gpope.core.envs.hiv` | softmax over the learned Q | 200 |
| ``random_mdp/<seed>`` | :mod:`~gpope.core.envs.random_mdp`, tabular, drawn from the seed | Dirichlet rows | drawn |
| ``random_mdp_linear/<seed>`` | the same with linear observation vectors | Dirichlet rows | drawn |

Simulators load lazily (the HIV and mountain-car policies are stored artifacts), so listing the
registry costs nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpope.core.envs.ehr import CHAIN_SPEC, HIV_SPEC, MOUNTAINCAR_SPEC, EventTableSpec
from gpope.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

    from gpope.core.envs.random_mdp import RandomMDP
    from gpope.core.policies import Policy
    from gpope.core.trajectories.transitions import Transitions

__all__ = ["SimDomain", "check_domain_name", "domain_names", "get_domain", "random_mdp_of"]

#: ``generate(n, rng, behaviour policy, episode cap) -> Transitions``.
Generator = Callable[["int", "np.random.Generator", "Policy | None", int], "Transitions"]


@dataclass(frozen=True)
class SimDomain:
    """One simulated domain.

    Attributes:
        name: the registry name (``gpope simulate --domain NAME``, a spec's ``domain:``).
        event_spec: how its episodes are written as bronze event tables (variables, actions,
            terminal variable).
        max_steps: the default episode cap (decisions per patient at most).
        generate: ``(n, rng, policy, cap) -> Transitions``, ``n`` episodes under ``policy``.
        behaviour: ``() -> Policy | None``: the logged behaviour policy (None: the only action).
    """

    name: str
    event_spec: EventTableSpec
    max_steps: int
    generate: Generator
    behaviour: Callable[[], Policy | None]

    def dataset_mapping(self, max_length: int | None = None) -> dict[str, Any]:
        """The ``datasets:`` entry that ingests this domain's event tables (variables, actions,
        ``max_length`` = the episode cap unless given, ``terminal_variable``)."""
        spec = self.event_spec
        entry: dict[str, Any] = {"variables": list(spec.variables), "actions": list(spec.actions),
                                 "max_length": int(max_length or self.max_steps)}
        if spec.terminal_variable is not None:
            entry["terminal_variable"] = spec.terminal_variable
        return entry


def _chain() -> SimDomain:
    from gpope.core.envs import chain

    def generate(n: int, rng: np.random.Generator, policy: Policy | None, cap: int) -> Transitions:
        return chain.generate(n, rng, chain.ChainConfig(max_steps=cap))

    return SimDomain("chain", CHAIN_SPEC, chain.ChainConfig().max_steps, generate, lambda: None)


def _mountaincar() -> SimDomain:
    from gpope.core.envs import mountaincar

    def generate(n: int, rng: np.random.Generator, policy: Policy | None, cap: int) -> Transitions:
        return mountaincar.generate(n, rng, _needs(policy, "mountaincar"), max_steps=cap)

    return SimDomain("mountaincar", MOUNTAINCAR_SPEC, mountaincar.MAX_STEPS, generate,
                     lambda: mountaincar.learned_policy("epsilon_greedy", epsilon=0.1))


def _hiv() -> SimDomain:
    from gpope.core.envs import hiv, train_hiv

    def generate(n: int, rng: np.random.Generator, policy: Policy | None, cap: int) -> Transitions:
        return hiv.generate(n, rng, _needs(policy, "hiv"), n_steps=cap)

    return SimDomain("hiv", HIV_SPEC, hiv.MAX_STEPS, generate, train_hiv.behavior_policy)


def _needs(policy: Policy | None, name: str) -> Policy:
    if policy is None:
        raise ConfigError(f"Simulating {name!r} needs a behaviour policy; got None.")
    return policy


_BUILTIN: dict[str, Callable[[], SimDomain]] = {
    "chain": _chain, "mountaincar": _mountaincar, "hiv": _hiv,
}  # fmt: skip
_FAMILIES: dict[str, str] = {"random_mdp": "tabular", "random_mdp_linear": "linear"}


def random_mdp_of(name: str) -> RandomMDP:
    """The :class:`~gpope.core.envs.random_mdp.RandomMDP` behind ``random_mdp/<seed>`` or
    ``random_mdp_linear/<seed>`` (:meth:`RandomMDPConfig.drawn`).

    Raises:
        ConfigError: ``name`` is not such a name.
    """
    from gpope.core.envs.random_mdp import RandomMDPConfig, random_mdp

    family, _, seed = name.partition("/")
    if family not in _FAMILIES or not seed.isdigit():
        raise ConfigError("A generated domain is named 'random_mdp/<seed>' or "
                          f"'random_mdp_linear/<seed>' with an integer seed >= 0. Got {name!r} "
                          "instead.")
    return random_mdp(RandomMDPConfig.drawn(int(seed), features=_FAMILIES[family]))  # type: ignore[arg-type]


def _random(name: str) -> SimDomain:
    mdp = random_mdp_of(name)

    def generate(n: int, rng: np.random.Generator, policy: Policy | None, cap: int) -> Transitions:
        return mdp.generate(n, rng, max_steps=cap)

    n_obs = 1 if mdp.config.features == "tabular" else mdp.config.n_dims
    variables = ("state",) if n_obs == 1 else tuple(f"x{j}" for j in range(n_obs))
    spec = EventTableSpec(variables=variables,
                          actions=tuple(f"a{k}" for k in range(mdp.config.n_actions)),
                          terminal_variable="episode_end")
    return SimDomain(name, spec, mdp.config.max_steps, generate, lambda: None)  # mu is internal


def domain_names() -> tuple[str, ...]:
    """The fixed names plus the generated families' patterns (for help texts and messages)."""
    return (*_BUILTIN, *(f"{f}/<seed>" for f in _FAMILIES))


def check_domain_name(name: object) -> str:
    """``name`` if it names a registered domain, without loading its simulator.

    Raises:
        ConfigError: unknown name (the message lists the valid ones).
    """
    if isinstance(name, str) and name in _BUILTIN:
        return name
    if isinstance(name, str) and name.partition("/")[0] in _FAMILIES:
        if name.partition("/")[2].isdigit():
            return name
    raise ConfigError("The 'domain' parameter must be one of "
                      f"{', '.join(map(repr, domain_names()))}. Got {name!r} instead.")


@functools.lru_cache(maxsize=64)
def get_domain(name: str) -> SimDomain:
    """The domain registered under ``name`` (its simulator module imported on first use).

    Raises:
        ConfigError: unknown name (the message lists the valid ones).
    """
    name = check_domain_name(name)
    return _BUILTIN[name]() if name in _BUILTIN else _random(name)
