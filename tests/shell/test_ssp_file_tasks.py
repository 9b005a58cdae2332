"""The SSP aggregate's file tasks (delta-rs storage): every file in exactly one task, about
``spark.sql.files.maxPartitionBytes`` per task, and Spark's byte-size strings read right. No Spark."""

from __future__ import annotations

import pytest

from gpope.shell.pipeline.ssp import _bytes, _file_tasks


@pytest.mark.parametrize(("text", "value"), [
    ("134217728", 2**27), ("134217728b", 2**27), ("128MB", 2**27), ("128m", 2**27), ("1g", 2**30),
])
def test_spark_byte_sizes(text, value):
    assert _bytes(text) == value


def test_files_are_grouped_by_bytes_each_exactly_once(tmp_path):
    sizes = [50, 40, 30, 20, 10, 5]
    paths = []
    for i, size in enumerate(sizes):
        (tmp_path / f"f{i}").write_bytes(b"x" * size)
        paths.append(str(tmp_path / f"f{i}"))
    for max_bytes, count in [(60, 3), (1000, 1), (1, 6), (155, 1), (154, 2)]:
        tasks = _file_tasks(tuple(paths), max_bytes)
        assert len(tasks) == count, max_bytes
        assert sorted(p for t in tasks for p in t) == sorted(paths)  # none lost, none twice
        assert all(tasks)
    loads = [sum(sizes[paths.index(p)] for p in t) for t in _file_tasks(tuple(paths), 60)]
    assert max(loads) - min(loads) <= 10  # largest first into the lightest task: balanced
