"""The private part of ``gpope evaluate`` as pure functions of public inputs.

* :mod:`~gpope.core.evaluation.loading`: how the statistics reach the driver (in memory, dense or
  sparse, or streamed), from m, the width n and the feature map only.
* :mod:`~gpope.core.evaluation.plan`: the run's :class:`~gpope.core.evaluation.plan.ReleasePlan`
  (sigmas, the composed dp-accounting event, the neighbouring relation, the charge, what is
  released); the Spark stage executes it and does no privacy arithmetic itself.
"""

from __future__ import annotations

from gpope.core.evaluation.loading import plan_loading
from gpope.core.evaluation.plan import ReleaseComponent, ReleasePlan, plan_release

__all__ = ["ReleaseComponent", "ReleasePlan", "plan_loading", "plan_release"]
