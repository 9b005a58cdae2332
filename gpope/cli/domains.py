"""The ``--domain`` argument of the commands that simulate or read a simulated cohort."""

from __future__ import annotations

import argparse

from gpope.core.envs.registry import check_domain_name, domain_names

__all__ = ["domain_arg", "domain_help"]


def domain_arg(name: str) -> str:
    """argparse ``type=``: a registered domain name; an unknown one is a usage error that lists
    the valid names (:mod:`gpope.core.envs.registry`)."""
    from gpope.errors import ConfigError

    try:
        return check_domain_name(name)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def domain_help(what: str) -> str:
    """``what`` followed by the registered names."""
    return f"{what}: one of {', '.join(domain_names())}"
