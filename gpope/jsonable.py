"""One JSON fallback for numpy values, shared by the CLI, MLflow logging and experiment outputs."""

from __future__ import annotations

from typing import Any

__all__ = ["jsonable"]


def jsonable(value: Any) -> Any:
    """``json.dump(default=...)`` hook: numpy arrays -> lists, numpy scalars -> Python, else str."""
    try:
        import numpy as np

        if isinstance(value, np.ndarray):
            return value.tolist()
        if isinstance(value, np.generic):
            return value.item()
    except ImportError:  # pragma: no cover
        pass
    return str(value)
