"""The pure numerical core of gpope: numpy, scipy and dp-accounting only.

Nothing under this package imports pyspark, deltalake or mlflow (a test checks it). Import the
submodules directly, e.g. ``from gpope.core.gpope.solver import run_gpope, GPOPEConfig``.
"""
