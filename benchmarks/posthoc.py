"""Fit times of the post-hoc calibrators: this tree's L-BFGS against the Newton fits before it.

Run: ``python benchmarks/posthoc.py`` (``make bench`` runs every benchmark). Issue 34, item
2 made every fitted map (temperature, vector, matrix and Dirichlet scaling) use one
optimiser, L-BFGS (:func:`calib.posthoc._base.minimise_lbfgs`); before it, temperature
scaling ran a safeguarded Newton on ``log T`` and vector/matrix/Dirichlet scaling Newton
with the exact Hessian up to 600 parameters (L-BFGS beyond). This script loads the
calibrators of the baseline commit (``--baseline``, default ``e610f50``, the last with the
Newton fits) from git beside this tree's, fits both on the same real CIFAR records
shipped in ``calib/data/cifar_softmax`` (10,000 test images; ``log p`` as logits) and prints

* the CPU time of each fit (``time.process_time``: CPU seconds of this process, far less
  disturbed than wall time by other jobs on a shared machine), median over rounds in
  which the two take turns, and the paired ratio new / baseline;
* how far apart the two optima are: the relative difference (new - baseline) / baseline
  of the fitted objective (mean NLL plus penalty) and, for temperature scaling, of ``T``;
  and which fits warned that they did not converge.

Targets: the same optimum (objective within 1e-6 relative, ``T`` within 1e-5) at no more
than 2-3x the baseline's time. Matrix and Dirichlet scaling on 100 classes (10,100
parameters) ran L-BFGS before too; there the baseline stops at ``max_iter`` short of the
optimum, so the new objective is lower. ``--quick``: one round and no 100-class matrix
fits.

Measured (issue 34, item 2) on a 2-core AMD EPYC shared with other jobs (load 5-8),
torch 2.14.1 on one thread, baseline e610f50 (Newton) against the L-BFGS of this tree;
CPU seconds, median of 5 rounds (3 for the 100-class vector fits, 1 for the 100-class
matrix fits), ratio the median of same-round pairs::

    record                   calibrator               baseline     new   ratio  objective diff
    wrn16_4_cifar10          TemperatureScaling          0.014   0.028   2.00x  8e-16 (T 3e-12)
    wrn16_4_cifar10          VectorScaling               0.083   0.099   1.15x  0
    wrn16_4_cifar10          MatrixScaling               0.247   0.203   0.89x  5e-16
    wrn16_4_cifar10          MatrixScaling(0.1, 0.1)     0.188   0.181   0.96x  1e-16
    wrn16_4_cifar10          DirichletCalibration        0.204   0.201   1.01x  1e-16
    lenet5_cifar10           Dirichlet(1.0, 0.01)        0.150   0.123   0.80x  3e-16
    wrn16_4_cifar100         TemperatureScaling          0.027   0.067   2.31x  2e-16 (T 4e-15)
    wrn16_4_cifar100         VectorScaling               0.461   0.414   0.90x  2e-16
    densenet_bc100_cifar100  VectorScaling               0.502   0.571   1.15x  0
    wrn16_4_cifar100         MatrixScaling(10, 10)      25.805   5.737   0.22x  -5.8e-3 (baseline stops early)
    wrn16_4_cifar100         Dirichlet(1.0, 1.0)        24.740   8.856   0.36x  -1.5e-2 (baseline stops early)

The plain L-BFGS of the first attempt (no warm start, no preconditioner, torch's LBFGS)
took 5-20x the Newton fits on 10 classes and 15x on 100 (6.8 s for vector scaling).
"""
from __future__ import annotations

import argparse
import importlib.util
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import torch
import torch.nn.functional as F

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._timing import header, interleaved_times, paired_ratio  # noqa: E402
from calib import posthoc  # noqa: E402
from calib.data import cifar_predictions  # noqa: E402

BASELINE = "e610f50"
CASES = [  # (record, calibrator, constructor arguments, rounds)
    ("wrn16_4_cifar10", "TemperatureScaling", (), 5),
    ("wrn16_4_cifar10", "VectorScaling", (), 5),
    ("wrn16_4_cifar10", "MatrixScaling", (), 5),
    ("wrn16_4_cifar10", "MatrixScaling", (0.1, 0.1), 5),
    ("wrn16_4_cifar10", "DirichletCalibration", (), 5),
    ("lenet5_cifar10", "DirichletCalibration", (1.0, 0.01), 5),
    ("wrn16_4_cifar100", "TemperatureScaling", (), 5),
    ("wrn16_4_cifar100", "VectorScaling", (), 3),
    ("densenet_bc100_cifar100", "VectorScaling", (), 3),
    ("wrn16_4_cifar100", "MatrixScaling", (10.0, 10.0), 1),
    ("wrn16_4_cifar100", "DirichletCalibration", (1.0, 1.0), 1),
]


def load_baseline(ref: str):
    """``calib.posthoc`` as it was at ``ref``, imported under the name ``_posthoc_baseline`` inside the calib package (or None).

    Its files are read with ``git show`` into a temporary folder; their relative imports
    (``from .. import metrics``) resolve to this tree's ``calib``.
    """
    try:
        names = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "--name-only", ref, "calib/posthoc/"],
                               capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError) as err:
        print(f"baseline {ref!r} not readable from git ({err}); timing this tree only")
        return None
    folder = pathlib.Path(tempfile.mkdtemp()) / "posthoc"
    folder.mkdir()
    for name in names:
        text = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:{name}"], capture_output=True, check=True).stdout
        (folder / pathlib.Path(name).name).write_bytes(text)
    # inside the calib package, so the old posthoc's relative imports find calib's other parts
    name = ".".join(("calib", "_posthoc_baseline"))  # made here, not a name in the tree
    spec = importlib.util.spec_from_file_location(name, folder / "__init__.py",
                                                  submodule_search_locations=[str(folder)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def objective(cal, g: torch.Tensor, y: torch.Tensor) -> float:
    """The fitted objective: mean NLL of the calibrated logits plus the ODIR penalty (if any)."""
    if hasattr(cal, "temperature") and not hasattr(cal, "bias"):
        return float(F.cross_entropy(g.double() / cal.temperature, y))
    x = cal._features(g.double())
    return float(F.cross_entropy(cal._map(x, cal.weights, cal.bias), y) + cal._penalty(cal.weights, cal.bias, g.shape[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=BASELINE, help="git ref of the calibrators to compare with")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1: steadier CPU times)")
    parser.add_argument("--quick", action="store_true", help="one round, no 100-class matrix/Dirichlet fits")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    base = load_baseline(args.baseline)
    header(f"post-hoc fits, CPU seconds (time.process_time), this tree vs {args.baseline}")
    print(f"{'record':<24} {'calibrator':<28} {'baseline s':>10} {'new s':>8} {'ratio':>16} "
          f"{'objective rel diff':>18} {'T rel diff':>10} {'not converged':>14}")
    for record, name, hyper, rounds in CASES:
        if args.quick and (record.endswith("100") and name in ("MatrixScaling", "DirichletCalibration")):
            continue
        probs, y = cifar_predictions(record)
        g = torch.log(probs.double())
        fitted, warned = {}, {}

        def fit(module, key):
            def run():
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always", RuntimeWarning)  # the baseline warns where it stops early
                    fitted[key] = getattr(module, name)(*hyper).fit(g, y)
                warned[key] = any("did not converge" in str(w.message) for w in caught)
            return run

        fns = {"new": fit(posthoc, "new")}
        if base is not None:
            fns["baseline"] = fit(base, "baseline")
        warmup = 0 if rounds == 1 else 1  # the 100-class matrix fits: one (long) round, no warm-up
        rounds = 1 if args.quick else rounds
        times = interleaved_times(fns, rounds=rounds, warmup=warmup, clock=time.process_time)
        label = f"{name}{hyper if hyper else ''}"
        new_s = statistics.median(times["new"])
        if base is None:
            print(f"{record:<24} {label:<28} {'':>10} {new_s:8.3f}")
            continue
        base_s = statistics.median(times["baseline"])
        med, lo, hi = paired_ratio(times["new"], times["baseline"])
        a, b = objective(fitted["new"], g, y), objective(fitted["baseline"], g, y)
        t_diff = ""
        if name == "TemperatureScaling":
            t_new, t_base = fitted["new"].temperature, fitted["baseline"].temperature
            t_diff = f"{(t_new - t_base) / t_base:10.1e}"
        ratio = f"{med:5.2f}x" + (f" [{lo:.2f}-{hi:.2f}]" if rounds > 1 else "")
        stopped = ",".join(k for k in ("baseline", "new") if warned.get(k)) or "-"
        print(f"{record:<24} {label:<28} {base_s:10.3f} {new_s:8.3f} {ratio:>16} {(a - b) / b:18.1e} {t_diff:>10} "
              f"{stopped:>14}", flush=True)


if __name__ == "__main__":
    main()
