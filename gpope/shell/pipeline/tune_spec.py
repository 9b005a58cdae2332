"""``gpope tune --spec FILE``: write a spec's ``evaluation:`` block from PUBLIC simulated data only.

A public cohort of the spec's ``domain`` is simulated from ``public_seed``;
:func:`gpope.core.tuning.public.tune_operating_point` picks (clip, step size) per epsilon by the
median relative MSPBE of noisy runs on it, the other settings coming from the spec's block, the
configuration and the command line; the block (with the seed, size, grid and scores under
``tuning``) replaces the spec file's ``evaluation:`` section, everything else kept verbatim. No
private table is read.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gpope.errors import ConfigError

if TYPE_CHECKING:
    from gpope.core.evaluation.settings import RunSettings

__all__ = ["TUNE_SEED", "TuneSpecReport", "replace_evaluation_block", "tune_spec"]

#: Default seed of the public tuning cohort (public data; distinct from the MSPBE cohort's).
TUNE_SEED = 20_261_123

_FIXED_KEYS = ("sampling", "accountant", "passes", "iterations", "batch_rate", "batch_size",
               "step_schedule", "step_offset", "step_offset_fraction", "averaging",
               "tail_fraction")


@dataclass(frozen=True)
class TuneSpecReport:
    """What ``gpope tune --spec`` wrote."""

    spec: str
    domain: str
    block: dict[str, Any]
    seconds: float
    written: bool

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def summary(self) -> str:
        t = self.block.get("tuning", {})
        lines = [
            f"{'wrote' if self.written else 'would write'} the evaluation: block of {self.spec} "
            f"(public {self.domain} cohort: {t.get('patients')} trajectories, seed "
            f"{t.get('public_seed')}, {self.seconds:.0f} s)",
            f"  budget: passes {self.block.get('passes')}, iterations "
            f"{self.block.get('iterations')}, sampling {self.block.get('sampling')}, schedule "
            f"{self.block.get('step_schedule')}",
        ]
        for p in self.block.get("tuned", []):
            lines.append(f"  epsilon {p['epsilon']:g}: clip {p['clip']:g}, step size "
                         f"{p['step_size']:g} (public relative MSPBE {p.get('score')})")
        return "\n".join(lines)


def tune_spec(
    spec_path: str | Path,
    *,
    settings: RunSettings,
    patients: int,
    max_length: int | None = None,
    public_seed: int | None = None,
    epsilons: Sequence[float] = (0.1, 1.0, 10.0),
    delta: float = 1e-6,
    trials: int = 3,
    overrides: dict[str, Any] | None = None,
    clips: Sequence[float] | None = None,
    steps: Sequence[float] | None = None,
    write: bool = True,
    log: Callable[[str], None] | None = None,
    command: str | None = None,
) -> TuneSpecReport:
    """Tune the spec at ``spec_path`` on public simulated data and write its evaluation: block
    (``public_seed`` None: :data:`TUNE_SEED`; ``settings``: the configuration's ``evaluation``).

    Raises:
        ConfigError: the spec has no ``domain`` (no public simulator to tune on).
    """
    from gpope.core.envs.cohort import public_transitions
    from gpope.core.evaluation.settings import SettingsLayer
    from gpope.core.trajectories.batch import statistics_of_transitions
    from gpope.core.tuning.public import tune_operating_point
    from gpope.shell.pipeline.jobargs import load_spec, resolve_path

    start = time.perf_counter()
    path = resolve_path(spec_path)
    spec = load_spec(path)
    if spec.domain is None:
        raise ConfigError(
            f"Spec {str(spec_path)!r} has no 'domain': `gpope tune --spec` needs a public simulator "
            "to tune on. For real data without a simulator, write the evaluation: block by hand "
            "from public knowledge, or use the private tuning path (`gpope evaluate --tune private`)."
        )
    from gpope.core.gpope.operating import merge_layers

    fixed: dict[str, Any] = {k: v for k, v in settings.solver_settings().items()
                             if k in _FIXED_KEYS}
    if spec.evaluation is not None:
        fixed = merge_layers({k: spec.evaluation.get(k) for k in _FIXED_KEYS}, fixed)
    if overrides:
        fixed = merge_layers(overrides, fixed)
    fixed = {k: v for k, v in fixed.items() if v is not None}
    public_seed = TUNE_SEED if public_seed is None else public_seed
    rng = np.random.default_rng(public_seed)
    transitions = public_transitions(spec.domain, patients, rng, max_length=max_length)
    stats = statistics_of_transitions(transitions, spec, representation="auto")
    population = stats.population()
    result = tune_operating_point(
        stats, population, settings=fixed, epsilons=epsilons, delta=delta, trials=trials,
        rng=np.random.default_rng([public_seed, 1]), clips=clips, steps=steps, log=log,
    )
    coarse_steps = sorted({r["step_size"] for r in result.rows})
    tuning = {
        "command": command or f"gpope tune --spec {spec_path}",
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "domain": spec.domain,
        "patients": int(patients),
        "max_length": max_length,
        "public_seed": int(public_seed),
        "delta": float(delta),
        "trials": int(trials),
        "criterion": "median relative MSPBE (MSPBE / MSPBE(0)) on the public cohort's population",
        "gradient_scale": float(f"{result.gradient_scale:.4g}"),
        "eta0": result.eta0,
        "clip_grid": sorted({r["clip"] for r in result.rows}),
        "step_grid": coarse_steps,
        "rule": "tuned point with m_pub * epsilon nearest to m * epsilon (log scale); see "
                "gpope.core.gpope.operating",
    }
    # the interval settings are hand-chosen on public studies: a re-tune keeps them
    old = spec.evaluation
    kept_intervals = old.interval_settings() if old is not None else {}
    provenance = dict(old.intervals_provenance) if old is not None else {}
    block = SettingsLayer({**fixed, **kept_intervals}, "spec", result.points, tuning, provenance)
    block = _keep_other_epsilons(block, spec.evaluation, epsilons)
    data = block.to_dict()
    if write:
        text = path.read_text()
        path.write_text(replace_evaluation_block(text, data))
        load_spec(path)  # the written file parses back
    return TuneSpecReport(str(spec_path), spec.domain, data, time.perf_counter() - start, write)


_COHORT_KEYS = ("domain", "patients", "max_length", "public_seed", "delta")


def _keep_other_epsilons(new: Any, old: Any, epsilons: Sequence[float]) -> Any:
    """``new`` plus the spec's earlier tuned points at epsilons not re-tuned now, when both were
    tuned on the same public cohort (domain, size, episode cap, seed, delta) with the same fixed
    settings; the earlier command and grids are recorded under ``tuning.kept``. Otherwise
    ``new`` unchanged (a re-tune on another cohort or budget replaces every point)."""
    import dataclasses

    if old is None or not old.tuned:
        return new
    others = [p for p in old.tuned if not any(abs(p.epsilon - e) <= 1e-12 * e for e in epsilons)]
    settings = {k: v for k, v in new.to_dict().items() if k not in ("tuned", "tuning")}
    same_settings = settings == {k: v for k, v in old.to_dict().items()
                                 if k not in ("tuned", "tuning")}
    same_cohort = all(old.tuning.get(k) == new.tuning.get(k) for k in _COHORT_KEYS)
    if not (others and same_settings and same_cohort):
        return new
    earlier = {float(k["epsilon"]): k for k in old.tuning.get("kept", [])}
    kept = []
    for p in others:  # a point kept before keeps its own provenance
        src = earlier.get(float(p.epsilon), old.tuning)
        # each entry gets its own copy of the grids (shared lists would be written as YAML aliases)
        kept.append({"epsilon": p.epsilon, "command": src.get("command"), "date": src.get("date"),
                     "clip_grid": list(src.get("clip_grid", [])),
                     "step_grid": list(src.get("step_grid", []))})
    tuning = {**new.tuning, "kept": kept}
    tuned = tuple(sorted((*new.tuned, *others), key=lambda p: p.epsilon))
    return dataclasses.replace(new, tuned=tuned, tuning=tuning)


def replace_evaluation_block(text: str, block: dict[str, Any]) -> str:
    """``text`` (a spec YAML) with its top-level ``evaluation:`` section replaced by ``block``.

    The section runs from its ``evaluation:`` line (and the comment lines right above it written
    by this function) to the next top-level key or the end; other lines are kept verbatim.
    """
    import yaml

    lines = text.splitlines()
    out: list[str] = []
    skipping = False
    for line in lines:
        if re.match(r"^evaluation\s*:", line):
            skipping = True
            while out and out[-1].startswith("# evaluation: written by"):
                out.pop()
            continue
        if skipping and (line.strip() == "" or line.startswith((" ", "\t", "#"))):
            continue
        skipping = False
        out.append(line)
    while out and not out[-1].strip():
        out.pop()
    body = yaml.safe_dump({"evaluation": block}, sort_keys=False, default_flow_style=None,
                          width=100)
    header = ("# evaluation: written by `gpope tune --spec` on PUBLIC simulated data only "
              "(provenance under tuning:); edit by re-running it (it keeps the interval settings)")
    return "\n".join([*out, header, body.rstrip()]) + "\n"
