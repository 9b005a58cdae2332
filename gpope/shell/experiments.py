"""Run a paper experiment end to end: tune on public data, run the trials, write and track results.

Writes ``trials.csv``, ``summary.json``, ``tuning.json`` and ``figures/*.png`` into ``out`` and
logs an MLflow parent run with one nested run per configuration. Everything here is simulated
data: the metrics are not private diagnostics of real data.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gpope.core.experiments import DOMAINS, TuningTable, summarize
from gpope.jsonable import jsonable

__all__ = ["FIGURES", "make_settings", "run_experiment", "run_tuning"]

Log = Callable[[str], None]

#: Per domain: (file stem, record filter (figure), x key, metric, title, xlabel, ylabel, logx).
FIGURES: dict[str, list[tuple[str, str, str, str, str, str, str, bool]]] = {
    "chain": [
        ("chain_mspbe_vs_m", "m", "m", "rel_mspbe", "Chain: relative MSPBE vs m",
         "m (trajectories)", "relative MSPBE", False),
        ("chain_value_error_vs_m", "m", "m", "value_error", "Chain: value error vs m",
         "m (trajectories)", "RMS value error", False),
        ("chain_mspbe_vs_step", "step", "multiplier", "rel_mspbe",
         "Chain: relative MSPBE vs step size (multiple of the tuned one)",
         "step-size multiplier", "relative MSPBE", True),
    ],
    "mountaincar": [
        ("mountaincar_onpolicy_mspbe_vs_m", "on", "m", "rel_mspbe",
         "Mountain car on-policy: relative MSPBE vs m", "m (trajectories)", "relative MSPBE",
         True),
        ("mountaincar_offpolicy_mspbe_vs_m", "off", "m", "rel_mspbe",
         "Mountain car off-policy: relative MSPBE vs m", "m (trajectories)", "relative MSPBE",
         True),
    ],
    "hiv": [
        ("hiv_mspbe_vs_m", "off", "m", "rel_mspbe", "HIV off-policy: relative MSPBE vs m",
         "m (patients)", "relative MSPBE", True),
    ],
}

_GROUP = ("figure", "m", "epsilon", "method", "label", "multiplier")


def make_settings(domain: str, *, quick: bool = False, **overrides: Any) -> Any:
    """The settings object of ``domain`` (quick preset or paper defaults) with overrides.

    Overrides whose value is None are ignored; unknown names raise ConfigError.
    """
    from gpope.errors import ConfigError

    if domain not in DOMAINS:
        raise ConfigError(f"Unknown domain {domain!r}; choose one of {sorted(DOMAINS)}.")
    cls = DOMAINS[domain].settings
    given = {k: v for k, v in overrides.items() if v is not None}
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(given) - names
    if unknown:
        raise ConfigError(f"{domain} settings have no option(s) {sorted(unknown)}.")
    return cls.quick(**given) if quick else cls(**given)


def run_tuning(domain: str, settings: Any, *, public_seed: int | None = None,
               log: Log | None = None) -> TuningTable:
    """Tune the GPOPE variants of ``domain`` on public simulated data."""
    return DOMAINS[domain].tune(settings, public_seed=public_seed, log=log)


def _write_csv(path: Path, records: Sequence[dict[str, Any]]) -> None:
    keys: list[str] = []
    for r in records:
        for k in r:
            if k not in keys:
                keys.append(k)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys)
        writer.writeheader()
        writer.writerows(records)



def run_experiment(
    domain: str,
    settings: Any,
    out: str | Path,
    *,
    tracking_uri: str | None = None,
    tuning: TuningTable | None = None,
    public_seed: int | None = None,
    log: Log | None = None,
    track: bool = True,
) -> dict[str, Any]:
    """Tune (unless ``tuning`` is given), run, write CSV/JSON/PNGs, log to MLflow.

    Returns:
        The summary dict (also written to ``out/summary.json``), with ``mlflow_run_id``.
    """
    out = Path(out)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if tuning is None:
        tuning = run_tuning(domain, settings, public_seed=public_seed, log=log)
    t_tune = time.perf_counter() - t0
    (out / "tuning.json").write_text(json.dumps(tuning.to_dict(), indent=2, default=jsonable))
    t1 = time.perf_counter()
    records = DOMAINS[domain].run(settings, tuning, log=log)
    t_run = time.perf_counter() - t1
    _write_csv(out / "trials.csv", records)
    rows = summarize(records, _GROUP)
    figures = []
    from gpope.shell.report import plot_lines

    for stem, fig, x, metric, title, xlabel, ylabel, logx in FIGURES[domain]:
        sel = [r for r in rows if r["figure"] == fig]
        if not sel:
            continue
        eps_values = sorted({r["epsilon"] for r in sel if r["epsilon"] is not None})
        sub = f" (epsilon {eps_values[0]:g}, delta {settings.delta:g})" if len(eps_values) == 1 else ""
        figures.append(str(plot_lines(sel, x=x, metric=metric, path=out / "figures" / f"{stem}.png",
                                      title=title + sub, xlabel=xlabel, ylabel=ylabel, logx=logx)))
    summary: dict[str, Any] = {
        "domain": domain,
        "settings": settings.to_dict(),
        "tuning": tuning.to_dict()["best"],
        "public_seed": tuning.seed,
        "cells": rows,
        "n_records": len(records),
        "seconds": {"tuning": t_tune, "trials": t_run, "total": time.perf_counter() - t0},
        "figures": figures,
        "mlflow_run_id": None,
    }
    if track:
        summary["mlflow_run_id"] = _track(domain, settings, out, rows, summary, tracking_uri)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=jsonable))
    return summary


def _track(domain: str, settings: Any, out: Path, rows: list[dict[str, Any]],
           summary: dict[str, Any], tracking_uri: str | None) -> str:
    """Parent run with settings and artifacts; one nested run per configuration."""
    import mlflow

    from gpope.shell.tracking import start_run

    uri = tracking_uri or f"sqlite:///{(out / 'mlflow.db').resolve()}"
    flat = {k: (json.dumps(v, default=jsonable) if isinstance(v, (dict, list, tuple)) else v)
            for k, v in settings.to_dict().items()}
    with start_run(tracking_uri=uri, experiment=f"gpope-experiment-{domain}",
                   run_name=f"{domain}-reproduction",
                   tags={"gpope.kind": "experiment", "gpope.domain": domain,
                         "gpope.data": "simulated"}) as parent:
        parent_id = parent.info.run_id
        mlflow.log_params({k: str(v)[:500] for k, v in flat.items()})
        mlflow.log_param("public_seed", summary["public_seed"])
        mlflow.log_metrics({f"seconds_{k}": float(v) for k, v in summary["seconds"].items()})
        configs: dict[tuple, list[dict[str, Any]]] = {}
        for r in rows:
            configs.setdefault((r["figure"], r["method"], r["label"], r["multiplier"]), []).append(r)
        for (figure, method, label, mult), items in configs.items():
            with start_run(tracking_uri=uri, experiment=f"gpope-experiment-{domain}",
                           run_name=f"{label} [{figure}]", nested=True, parent_run_id=parent_id,
                           tags={"gpope.method": method, "gpope.figure": figure}):
                mlflow.log_params({"method": method, "label": label, "multiplier": mult,
                                   "figure": figure})
                for r in sorted(items, key=lambda r: (r["epsilon"] or 0, r["m"])):
                    suffix = "" if r["epsilon"] is None else f"_eps{r['epsilon']:g}"
                    for key in ("rel_mspbe_mean", "rel_mspbe_std", "value_error_mean"):
                        if key in r:
                            mlflow.log_metric(key + suffix, float(r[key]), step=int(r["m"]))
        for name in ("trials.csv", "tuning.json"):
            mlflow.log_artifact(str(out / name))
        (out / "summary.json").write_text(json.dumps(summary, indent=2, default=jsonable))
        mlflow.log_artifact(str(out / "summary.json"))
        for fig in summary["figures"]:
            mlflow.log_artifact(fig, artifact_path="figures")
    return parent_id
