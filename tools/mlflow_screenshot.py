"""Regenerate the README's MLflow screenshots (docs/figures/mlflow_runs.png, mlflow_compare.png).

    make mlflow-screenshot        # = .venv/bin/python tools/mlflow_screenshot.py

What it does, end to end and offline (loopback only):

1. In a temporary lake with a SQLite MLflow store, simulates one HIV cohort and runs two private
   evaluations of the same spec (``conf/specs/hiv_demo.yaml``) at epsilon 0.5 and 1.0 with
   ``gpope.api`` (the calls ``gpope simulate/ingest/stats/evaluate`` make).
2. Starts ``mlflow server`` on a free 127.0.0.1 port against that store.
3. Takes headless Chromium screenshots of the experiment's runs table (filtered to the spec) and
   of MLflow's Compare view of the two runs: the view README "MLflow: comparing runs" documents.

Needs Chromium (``--chromium``, else ``$CHROMIUM``, else ``chromium``/``chromium-browser``/
``google-chrome`` on the PATH). The numbers in the screenshots change from run to run: the
evaluations draw their noise from OS entropy, as every private run does.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SPEC = REPO / "conf" / "specs" / "hiv_demo.yaml"
FIGURES = REPO / "docs" / "figures"
EPSILONS = (0.5, 1.0)
#: Width of MLflow 3's "MLflow Assistant" side panel at the right edge, cropped off (pixels).
ASSISTANT_PANEL_PX = 415


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _chromium(explicit: str | None) -> str:
    for name in (explicit, os.environ.get("CHROMIUM"), "chromium", "chromium-browser",
                 "google-chrome"):
        if name and shutil.which(name):
            return str(shutil.which(name))
    raise SystemExit("error: no Chromium found; pass --chromium PATH or set $CHROMIUM")


def make_runs(workdir: Path, *, patients: int, steps: int) -> tuple[str, str]:
    """Simulate a cohort and log two evaluations of one spec; returns (tracking_uri, dataset)."""
    from gpope import api
    from gpope.shell.pipeline.simulate import SimulateOptions

    lake = workdir / "lake"
    tracking = f"sqlite:///{lake / 'mlflow.db'}"
    config = api.load_config(lake=str(lake))
    spark = api.get_spark(config)
    dataset = "cohort1"
    try:
        api.simulate(spark, dataset, domain="hiv", patients=patients, seed=1,
                     options=SimulateOptions(n_steps=steps), config=config)
        api.ingest(spark, dataset, config=config)
        api.stats(spark, dataset, SPEC, config=config)
        for epsilon in EPSILONS:  # no seed: private runs, noise from OS entropy
            api.evaluate(spark, dataset, SPEC, epsilon=epsilon, delta=1e-5, config=config,
                         tracking_uri=tracking)
    finally:
        spark.stop()
    return tracking, dataset


def _wait_http(url: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"error: mlflow server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"error: mlflow server not answering at {url} after {timeout:.0f}s")


def _screenshot(chromium: str, url: str, out: Path, *, size: tuple[int, int], wait_ms: int,
                profile: Path) -> None:
    cmd = [
        chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
        "--no-first-run", "--disable-extensions", f"--user-data-dir={profile}",
        f"--window-size={size[0]},{size[1]}", f"--virtual-time-budget={wait_ms}",
        f"--screenshot={out}", url,
    ]
    out.unlink(missing_ok=True)
    subprocess.run(cmd, check=False, capture_output=True, timeout=300)
    if not out.exists() or out.stat().st_size == 0:
        raise SystemExit(f"error: Chromium wrote no screenshot for {url}")
    crop_assistant_panel(out)


def crop_assistant_panel(path: Path, width: int = ASSISTANT_PANEL_PX) -> None:
    """Cut the assistant side panel (empty in an offline UI) off the right edge of ``path``."""
    from PIL import Image

    with Image.open(path) as image:
        cropped = image.crop((0, 0, image.width - width, image.height))
    cropped.save(path, optimize=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=FIGURES, help="output folder (docs/figures)")
    parser.add_argument("--patients", type=int, default=2000, help="simulated patients (2000)")
    parser.add_argument("--steps", type=int, default=40, help="decisions per patient (40)")
    parser.add_argument("--chromium", help="Chromium/Chrome executable")
    parser.add_argument("--wait-ms", type=int, default=25000,
                        help="virtual time Chromium gives the page to render (25000)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary lake and print it")
    args = parser.parse_args(argv)
    chromium = _chromium(args.chromium)
    args.out.mkdir(parents=True, exist_ok=True)

    workdir = Path(tempfile.mkdtemp(prefix="gpope-mlflow-shot-"))
    server = None
    try:
        tracking, dataset = make_runs(workdir, patients=args.patients, steps=args.steps)
        import mlflow

        client = mlflow.MlflowClient(tracking_uri=tracking)
        experiment = client.get_experiment_by_name(api_experiment())
        runs = client.search_runs([experiment.experiment_id], f"params.dataset = '{dataset}'",
                                  order_by=["attributes.start_time ASC"])
        if len(runs) != len(EPSILONS):
            raise SystemExit(f"error: expected {len(EPSILONS)} runs, found {len(runs)}")
        port = _free_port()
        mlflow_bin = Path(sys.executable).with_name("mlflow")
        server = subprocess.Popen(
            [str(mlflow_bin), "server", "--backend-store-uri", tracking,
             "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        base = f"http://127.0.0.1:{port}"
        _wait_http(f"{base}/health", server, timeout=180)

        exp_id = experiment.experiment_id
        search = urllib.parse.urlencode({"searchFilter": "tags.gpope.spec = 'hiv_demo'"},
                                        quote_via=urllib.parse.quote)
        table_url = f"{base}/#/experiments/{exp_id}/runs?{search}"
        compare = urllib.parse.urlencode(
            {"runs": json.dumps([r.info.run_id for r in runs]),
             "experiments": json.dumps([exp_id])}, quote_via=urllib.parse.quote)
        compare_url = f"{base}/#/compare-runs?{compare}"
        profile = workdir / "chromium"
        _screenshot(chromium, table_url, args.out / "mlflow_runs.png", size=(1600, 700),
                    wait_ms=args.wait_ms, profile=profile)
        _screenshot(chromium, compare_url, args.out / "mlflow_compare.png", size=(1600, 2200),
                    wait_ms=args.wait_ms, profile=profile)
        print(f"wrote {args.out / 'mlflow_runs.png'} and {args.out / 'mlflow_compare.png'}")
        print(f"runs: {', '.join(r.info.run_name for r in runs)}")
    finally:
        if server is not None and server.poll() is None:
            os.killpg(server.pid, 15)
            server.wait(timeout=30)
        if args.keep:
            print(f"lake kept at {workdir / 'lake'}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


def api_experiment() -> str:
    """The experiment gpope logs to (``tracking.experiment`` of the default configuration)."""
    from gpope import api

    return api.load_config().tracking.experiment


if __name__ == "__main__":
    sys.exit(main())
