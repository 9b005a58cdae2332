"""A simulated cohort as plain files: the stand-in for an analyst's own event extract.

:func:`write_cohort_files` writes the bronze tables of a cohort (the same rows as ``gpope simulate``
writes into the lake for a seed) as ``observations``, ``treatments`` and ``outcomes`` Parquet or
CSV files (Parquet as pandas writes a frame with its defaults, ``DataFrame.to_parquet(path)``:
nanosecond tz-aware times; CSV with ISO UTC times), plus the ``conf.yaml`` whose ``datasets:`` entry ingests them. For a generated MDP
(``random_mdp/<seed>``, ``random_mdp_linear/<seed>``) it also writes ``spec.yaml`` (an own-data
spec: no ``domain``, no ``evaluation:`` block) and ``truth.json`` (the exact values at the spec's
reference states), so the own-data path (docs/OWN_DATA.md) can be checked against the truth.
No Spark is involved.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml

if TYPE_CHECKING:
    from gpope.shell.pipeline.simulate import SimulateOptions

__all__ = ["write_cohort_files"]


def write_cohort_files(
    domain: str,
    patients: int,
    seed: int | None,
    out: str | Path,
    *,
    options: SimulateOptions | None = None,
    fmt: Literal["parquet", "csv"] = "parquet",
    dataset: str = "mydata",
    progress: bool = False,
) -> dict[str, Any]:
    """Write the cohort's files under ``out`` (created; existing files of these names replaced).

    Returns:
        ``{"files": {table: path}, "conf": path, "spec": path or None, "truth": path or None,
        "rows": {table: n}}``.
    """
    import pyarrow as pa
    import pyarrow.csv as pacsv

    from gpope.core.envs.registry import get_domain
    from gpope.shell.pipeline.simulate import iter_simulated_tables, tables_to_arrow

    entry = get_domain(domain)
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    parts: dict[str, list[pa.Table]] = {}
    for _, tables in iter_simulated_tables(domain, patients, seed, options, progress=progress):
        for name, table in tables_to_arrow(tables).items():
            parts.setdefault(name, []).append(table)
    files, rows = {}, {}
    for name, tables in parts.items():
        table = pa.concat_tables(tables)
        path = folder / f"{name}.{fmt}"
        if fmt == "csv":  # ISO 8601 UTC times ("Z")
            times = pa.compute.strftime(table["time"], format="%Y-%m-%dT%H:%M:%SZ")
            table = table.set_column(table.schema.get_field_index("time"), "time", times)
            pacsv.write_csv(table, path)
        else:  # as an analyst's pandas frame would be written: nanosecond times
            table.to_pandas(coerce_temporal_nanoseconds=True).to_parquet(path)
        files[name], rows[name] = str(path), table.num_rows
    cap = options.n_steps if options is not None and options.n_steps else None
    conf = folder / "conf.yaml"
    conf.write_text(yaml.safe_dump({"datasets": {dataset: entry.dataset_mapping(cap)}},
                                   sort_keys=False))  # fmt: skip
    result: dict[str, Any] = {"files": files, "conf": str(conf), "spec": None, "truth": None,
                              "rows": rows}  # fmt: skip
    if domain.startswith("random_mdp"):
        from gpope.core.envs.registry import random_mdp_of

        mdp = random_mdp_of(domain)
        spec = folder / "spec.yaml"
        name = domain.replace("/", "_")
        spec.write_text(yaml.safe_dump(mdp.spec_mapping(name), sort_keys=False))
        truth = folder / "truth.json"
        truth.write_text(json.dumps({"domain": domain, "values": mdp.reference_values()}, indent=1))
        result.update(spec=str(spec), truth=str(truth))
    return result
