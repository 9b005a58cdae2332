"""Figures of the experiments (matplotlib, Agg backend): metric vs a parameter, one line per method.

Every figure shows the mean over trials with standard-deviation error bars (as in the paper) on a
log y axis; lines are grouped by ``label``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["plot_lines"]

_STYLES = {
    "gpope_paper": dict(color="tab:blue", marker="o"),
    "gpope_rdp": dict(color="tab:orange", marker="s"),
    "gpope_product": dict(color="tab:green", marker="^"),
    "dp_lsw": dict(color="tab:red", marker="v"),
    "dp_lsl": dict(color="tab:purple", marker="D"),
    "lstd": dict(color="black", marker="x"),
    "wis_lstd": dict(color="black", marker="x"),
    "dp_lsw_grid": dict(color="tab:red", marker="v"),
}


def plot_lines(
    rows: Sequence[dict[str, Any]],
    *,
    x: str,
    metric: str,
    path: str | Path,
    title: str,
    xlabel: str,
    ylabel: str,
    logx: bool = False,
) -> Path:
    """One line per ``label`` of summary ``rows`` (keys ``x``, ``label``, ``method``,
    ``<metric>_mean``, ``<metric>_std``) on a log y axis; writes a PNG and returns its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.0, 4.6))
    labels: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if f"{metric}_mean" in r:
            labels.setdefault(str(r["label"]), []).append(r)
    for label, items in labels.items():
        items = sorted(items, key=lambda r: float(r[x]))
        xs = np.array([float(r[x]) for r in items])
        ys = np.array([r[f"{metric}_mean"] for r in items])
        sd = np.array([r.get(f"{metric}_std", 0.0) for r in items])
        style = dict(_STYLES.get(str(items[0].get("method")), {}))
        if "x0.1" in label or "x10" in label:
            style["linestyle"] = "--" if "x0.1" in label else ":"
            style["alpha"] = 0.8
        lower = np.minimum(sd, ys * 0.999)  # keep the bars positive on the log axis
        ax.errorbar(xs, ys, yerr=[lower, sd], label=label, capsize=3, linewidth=1.4,
                    markersize=4, **style)
    ax.set_yscale("log")
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
