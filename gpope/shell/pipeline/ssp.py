"""The SSP release's data step as a Spark aggregate over ``trajectory_stats``.

:func:`spark_group_sums` computes, distributed, the K group sums of the jointly clipped
per-trajectory statistics vectors ``[vec A_i, b_i, vec C_i]`` (:mod:`gpope.core.ssp`): each
partition's Arrow batches are flattened, clipped (the core's total clip), assigned to groups by the
keyed hash and summed with numpy (``mapInArrow``), giving one partial-sum row per (partition,
group); those few partial rows are the only thing that reaches the driver, where they are reduced
to the (K, 2n^2+n) sums. No statistics row is collected, no Python runs per row. Noise is added
afterwards, once, on the driver (:func:`gpope.core.ssp.release_noisy_statistics`).

The result equals :func:`gpope.core.ssp.clipped_group_sums` of the same rows (to rounding, 1e-12;
a test checks it). :func:`public_clip` gives the default clip bound from PUBLIC data only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from gpope.errors import ConfigError, DataError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from gpope.core.spec import EvaluationSpec

__all__ = ["public_clip", "spark_group_sums"]


def _partial_sums(n: int, clip: float, key: int, groups: int):  # -> Callable
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        from gpope.core.ssp import assign_groups, clip_statistics, group_sums, statistics_vectors
        from gpope.shell.pipeline.sampled import _flat

        width = 2 * n * n + n
        acc = np.zeros((groups, width))
        seen = 0
        for batch in batches:
            k = batch.num_rows
            if k == 0:
                continue
            table = pa.Table.from_batches([batch])
            vec = statistics_vectors(_flat(table, "A", k, n * n), _flat(table, "b", k, n),
                                     _flat(table, "C", k, n * n))
            idx = table.column("traj_index").to_numpy()
            acc += group_sums(clip_statistics(vec, clip), assign_groups(idx, key, groups), groups)
            seen += k
        if seen == 0:
            return
        offsets = pa.array(np.arange(0, (groups + 1) * width, width, dtype=np.int32))
        sums = pa.ListArray.from_arrays(offsets, pa.array(acc.reshape(-1), type=pa.float64()))
        yield pa.RecordBatch.from_arrays(
            [pa.array(np.arange(groups, dtype=np.int32)), sums, pa.array(np.full(groups, seen, np.int64))],
            names=["group", "sums", "rows"],
        )

    return run


def spark_group_sums(stats: DataFrame, *, n: int, clip: float, key: int, groups: int,
                     expected_rows: int | None = None) -> np.ndarray:
    """(groups, 2n^2+n) sums of the jointly clipped statistics rows of ``stats`` (one spec).

    Args:
        stats: the spec's trajectory_stats rows (columns traj_index, A, b, C).
        n: number of features; clip: the public L2 bound; key: the secret group key (never
            logged); groups: K.
        expected_rows: m; if given, the rows summed must number exactly m (the table did not change
            since m was read).

    Raises:
        DataError: malformed arrays, or a row count different from ``expected_rows``.
    """
    partials = (
        stats.select("traj_index", "A", "b", "C")
        .mapInArrow(_partial_sums(n, float(clip), int(key), int(groups)),
                    "group int, sums array<double>, rows long")
        .toArrow()
    )
    width = 2 * n * n + n
    out = np.zeros((groups, width))
    if partials.num_rows:
        import pyarrow.compute as pc

        g = partials.column("group").to_numpy()
        flat = pc.list_flatten(partials.column("sums").combine_chunks()).to_numpy(zero_copy_only=False)
        np.add.at(out, g, flat.reshape(-1, width))
        rows = int(partials.column("rows").to_numpy()[g == 0].sum())
    else:
        rows = 0
    if expected_rows is not None and rows != expected_rows:
        raise DataError(
            f"The SSP aggregate summed {rows} statistics rows but m = {expected_rows}; the table "
            "changed during the run. Re-run `gpope stats`, then evaluate again."
        )
    return out


def public_clip(spec: EvaluationSpec, *, n_trajectories: int, quantile: float,
                max_length: int | None = None) -> float:
    """The default SSP clip bound: the ``quantile`` of per-trajectory ``||[A_i, b_i, C_i]||`` on a
    PUBLIC cohort simulated from the spec's domain (no private row is read).

    Raises:
        ConfigError: the spec has no domain (no public simulator) or the public cohort is disabled:
            the clip must then be given (``--ssp-clip`` or ``evaluation.ssp_clip``).
    """
    if spec.domain is None or n_trajectories <= 0:
        raise ConfigError(
            f"Spec {spec.name!r} has no public simulator (no 'domain'), so the SSP clip bound cannot "
            "be derived from public data; give it with --ssp-clip or evaluation.ssp_clip "
            "(a public bound on the L2 norm of one trajectory's [A_i, b_i, C_i])."
        )
    from gpope.core.ssp import statistics_vectors
    from gpope.shell.pipeline.public import public_cohort_transitions
    from gpope.shell.pipeline.stats import statistics_of_transitions

    tr = public_cohort_transitions(spec.domain, n_trajectories, max_length)
    rows = statistics_of_transitions(tr, spec).to_rows()
    norms = np.linalg.norm(statistics_vectors(rows["A"], rows["b"], rows["C"]), axis=1)
    clip = float(np.quantile(norms, quantile))
    if not clip > 0:
        raise DataError(f"The public cohort of spec {spec.name!r} gives statistics of norm 0; give --ssp-clip.")
    return clip
