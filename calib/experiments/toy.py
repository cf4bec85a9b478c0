"""Small, self-contained experiments from the papers that chapters call in one line.

``toy_weight_correlation``: Lin et al. 2024, §4.3. Five two-dimensional Gaussians with known class
posterior η(x); a small network trained for 5 epochs with cross-entropy; for each test
point the *true* calibration error c(x) = ‖η(x) − p̂(x)‖ (Lin et al. 2024, Eq. 1) and the Pearson
correlation between c and each sample-wise weight u_FL, u_DFL, u_gBS (Lin et al. 2024, Eqs. 7, 8, 11),
each weight's hyper-parameters grid-searched as the paper does. The paper reports
r = 0.550 (FL), 0.638 (DFL) and 0.664 (gBS), over 5 runs.

What Lin et al. 2024, §4.3 leaves open and we chose (documented so the numbers can be judged):

* *True calibration error.* Eq. 1 writes ``c(x) = ‖η(x) − p̂_c(x)‖`` and calls it "the
  difference between η(x) and p̂(x)"; the norm of the vector difference is the reading that
  type-checks, so the default ``error="l2"`` is ``‖η(x) − p̂(x)‖₂``. ``"sq"`` is its square
  (the quantity in Lin et al. 2024, Eq. 12) and ``"top"`` is ``|η_ŷ(x) − p̂_ŷ(x)|`` on the predicted class.
* *Labels in the weights.* u depends on the one-hot label y; we use each test point's
  sampled class, as in training. Lin et al. 2024, Eqs. 7-8 write the weights with the
  predicted class's probability p̂_c; calib evaluates u(p̂, y) at the label.
* *Network and optimiser.* "a two layer CNN" on 2-D points: we use an MLP with two linear
  layers (``calib.models.make("mlp", 5, in_features=2, hidden=(hidden,))``), Adam (lr 1e-3),
  batch 128, 5 epochs, unnormalised inputs, trained with cross-entropy. The paper states
  neither the optimiser nor the loss.
* *Grid search.* Each weight's grid point is chosen by the mean correlation over the seeds
  (an optimistic choice, like any selection on the evaluation data; the paper does not say
  how it selected). FL and DFL search γ; gBS searches γ and the norm order β.
* *Runs.* Seed ``s`` draws the means, the training points and the network initialisation;
  the test points come from the same five Gaussians with seed ``s + 1``.

``toy_ordering_study`` varies the open choices (network settings :data:`STUDY_NETWORKS`,
error definitions, grids); ``toy_correlation_table`` and ``toy_ordering_table`` turn both
results into the tables the Brier-score chapter shows.
"""
from __future__ import annotations

import itertools
import math
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from .. import profile
from .._checks import check_labels, check_positive_int, check_probs

__all__ = [
    "PAPER_TOY_CORRELATION",
    "DEFAULT_GRID",
    "true_calibration_error",
    "true_top_label_ece",
    "pearson",
    "weight_correlations",
    "train_toy_classifier",
    "toy_weight_correlation",
    "toy_predictions",
    "ordering",
    "toy_ordering_study",
    "NARROW_GRID",
    "STUDY_NETWORKS",
    "network_label",
    "toy_correlation_table",
    "toy_ordering_table",
]

PAPER_TOY_CORRELATION = {"FL": 0.550, "DFL": 0.638, "gBS": 0.664}  # Lin et al. 2024, §4.3
DEFAULT_GRID: dict[str, dict[str, tuple[float, ...]]] = {
    "FL": {"gamma": (0.25, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0)},
    "DFL": {"gamma": (0.25, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0)},
    "gBS": {"gamma": (0.25, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0), "norm": (1.0, 2.0, 3.0, 4.0)},
}
ERRORS = ("l2", "sq", "top")


def true_calibration_error(probs: Any, eta: Any, error: str = "l2") -> Tensor:
    """Per-sample calibration error against the true posterior (Lin et al. 2024, Eq. 1).

    ``"l2"``: ``‖η(x) − p̂(x)‖₂``; ``"sq"``: ``‖η(x) − p̂(x)‖₂²`` (Lin et al. 2024, Eq. 12);
    ``"top"``: ``|η_ŷ(x) − p̂_ŷ(x)|`` with ŷ = argmax p̂.
    """
    p = check_probs(probs, "probs").double()
    e = check_probs(eta, "eta").double()
    if e.shape != p.shape:
        raise ValueError(f"eta must have the shape of probs {tuple(p.shape)}, got {tuple(e.shape)}")
    if error == "l2":
        return (p - e).norm(dim=1)
    if error == "sq":
        return (p - e).pow(2).sum(1)
    if error == "top":
        top = p.argmax(1, keepdim=True)
        return (p.gather(1, top) - e.gather(1, top)).abs().squeeze(1)
    raise ValueError(f"error must be one of {ERRORS}, got {error!r}")


def true_top_label_ece(probs: Any, eta: Any, n_bins: int = 15) -> float:
    """The top-label ECE on ``n_bins`` equal-width bins with the labels' noise removed.

    With the true posterior η known, example i is right with probability ``η_ŷ(x_i)``
    (ŷ = argmax p̂). Binned ECE (:func:`calib.metrics.ece`, bins ``(lo, hi]``) replaces each
    bin's accuracy by ``mean_{i in B_m} η_ŷ(x_i)``::

        ECE_η = sum_m |B_m|/N |mean_{B_m} η_ŷ − mean_{B_m} p̂_ŷ|

    so it differs from the label-based ECE only by the sampling of the labels. Compared with the
    true top-label calibration error ``E|P(right | p̂_ŷ) − p̂_ŷ|`` it keeps the binning: by
    Jensen's inequality it is at most that error (up to the sampling of x), while the mean
    ``|η_ŷ − p̂_ŷ|`` (:func:`true_calibration_error`, ``"top"``) is at least it.
    """
    p = check_probs(probs, "probs").double()
    e = check_probs(eta, "eta").double()
    if e.shape != p.shape:
        raise ValueError(f"eta must have the shape of probs {tuple(p.shape)}, got {tuple(e.shape)}")
    n_bins = check_positive_int(n_bins, "n_bins")
    conf, top = p.max(1)
    right = e.gather(1, top[:, None]).squeeze(1)
    edges = torch.linspace(0, 1, n_bins + 1, dtype=torch.float64)
    idx = torch.bucketize(conf, edges[1:-1])  # (lo, hi], as metrics.ece; 0 in the first bin
    gap = torch.zeros(n_bins, dtype=torch.float64).index_add_(0, idx, right - conf)
    return float(gap.abs().sum() / conf.numel())


def pearson(a: Any, b: Any) -> float:
    """Pearson correlation ``cov(a, b) / (σ_a σ_b)`` of two 1-D samples (NaN if one is constant)."""
    x = torch.as_tensor(a, dtype=torch.float64).reshape(-1)
    y = torch.as_tensor(b, dtype=torch.float64).reshape(-1)
    if x.shape != y.shape or x.numel() < 2:
        raise ValueError(f"a and b must be 1-D samples of the same length >= 2, got {x.numel()} and {y.numel()}")
    x, y = x - x.mean(), y - y.mean()
    den = math.sqrt(float(x.pow(2).sum()) * float(y.pow(2).sum()))
    return float((x * y).sum()) / den if den > 0 else float("nan")


def _weight_fns() -> dict[str, Callable[..., Tensor]]:
    from ..losses import uncertainty as u

    return {"FL": u.u_fl, "DFL": u.u_dfl, "gBS": u.u_gbs}


def _grid_points(grid: dict[str, Sequence[float]]) -> list[dict[str, float]]:
    keys = sorted(grid)
    return [dict(zip(keys, vals)) for vals in itertools.product(*(grid[k] for k in keys))]


def weight_correlations(probs: Any, labels: Any, eta: Any, grid: dict[str, dict[str, Sequence[float]]] | None = None,
                        error: str = "l2") -> dict[str, list[tuple[dict[str, float], float]]]:
    """For each weight and grid point: Pearson r between u(p̂, y) and the true calibration error.

    Returns ``{"FL": [(params, r), ...], "DFL": [...], "gBS": [...]}``.
    """
    p = check_probs(probs, "probs").double()
    y = check_labels(labels, p.shape[0], p.shape[1])
    c = true_calibration_error(p, eta, error)
    grid = _check_grid(grid)
    fns = _weight_fns()
    return {name: [(pt, pearson(fns[name](p, y, **pt), c)) for pt in _grid_points(grid[name])] for name in grid}


def _check_grid(grid: dict[str, dict[str, Sequence[float]]] | None) -> dict[str, dict[str, Sequence[float]]]:
    if grid is None:
        return DEFAULT_GRID
    if not isinstance(grid, dict) or not grid or set(grid) - set(DEFAULT_GRID):
        raise ValueError(f"grid must map some of {sorted(DEFAULT_GRID)} to parameter grids, got {grid!r}")
    for name, g in grid.items():
        if set(g) != set(DEFAULT_GRID[name]) or any(len(v) == 0 for v in g.values()):
            raise ValueError(f"grid[{name!r}] must give non-empty lists for {sorted(DEFAULT_GRID[name])}, got {g!r}")
        if any(float(v) <= 0 for vals in g.values() for v in vals):
            raise ValueError(f"grid[{name!r}] values must be > 0 (gamma = 0 makes u constant)")
    return grid


def train_toy_classifier(x: Tensor, y: Tensor, num_classes: int, *, hidden: int = 64, epochs: int = 5,
                         batch_size: int = 128, lr: float = 1e-3, seed: int = 0,
                         device: torch.device | str | None = None, depth: int = 1) -> torch.nn.Module:
    """A ReLU MLP with ``depth`` hidden layers of width ``hidden`` (``depth=1``: two linear
    layers, our reading of Lin et al. 2024, §4.3), trained with cross-entropy and Adam."""
    from .. import models
    from ..data import DeviceLoader
    from ..profile import device as default_device

    dev = torch.device(device) if device is not None else default_device()
    torch.manual_seed(seed)
    net = models.make("mlp", num_classes, in_features=int(x.shape[1]), hidden=(hidden,) * depth).to(dev)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    loader = DeviceLoader(x.float(), y, batch_size, shuffle=True, device=dev, seed=seed)
    net.train()
    for _ in range(epochs):
        for xb, yb in loader:
            loss = F.cross_entropy(net(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return net.eval()


def toy_predictions(seed: int, n_train_per_class: int = 10000, n_test_per_class: int = 1000, *, hidden: int = 64,
                    depth: int = 1, epochs: int = 5, lr: float = 1e-3,
                    device: torch.device | str | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """One run of the toy experiment up to the predictions: ``(probs, labels, eta)`` on the test set.

    Seed ``seed`` draws the five Gaussians, the training points and the initialisation;
    the test points come from the same Gaussians with seed ``seed + 1``.
    """
    from ..data import gaussian_mixture

    train = gaussian_mixture(n_train_per_class, num_classes=5, dim=2, low=-10, high=10, scale=1.0, seed=seed)
    test = train.sample(n_test_per_class, seed=seed + 1)  # fresh points from the same five Gaussians
    net = train_toy_classifier(train.x, train.y, 5, hidden=hidden, epochs=epochs, seed=seed, device=device,
                               depth=depth, lr=lr)
    with torch.no_grad():
        probs = torch.softmax(net(test.x.to(next(net.parameters()).device)).double(), 1).cpu()
    return probs, test.y, test.eta


def _one_seed(seed: int, n_train: int, n_test: int, hidden: int, epochs: int, grid: Any, error: str,
              device: Any, depth: int = 1, lr: float = 1e-3) -> tuple[dict[str, list[tuple[dict[str, float], float]]], float]:
    probs, labels, eta = toy_predictions(seed, n_train, n_test, hidden=hidden, depth=depth, epochs=epochs, lr=lr,
                                         device=device)
    acc = float((probs.argmax(1) == labels).double().mean())
    return weight_correlations(probs, labels, eta, grid, error), acc


def toy_weight_correlation(seeds: Iterable[int] = (0, 1, 2, 3, 4), epochs: int = 5, n_train_per_class: int = 10000,
                           n_test_per_class: int = 1000, hidden: int = 64,
                           grid: dict[str, dict[str, Sequence[float]]] | None = None,
                           device: torch.device | str | None = None, error: str = "l2", depth: int = 1,
                           lr: float = 1e-3) -> dict[str, dict[str, Any]]:
    """Lin et al. 2024, §4.3: Pearson r between each uncertainty weight and the true calibration error.

    Per seed: draw the 5-Gaussian mixture (means uniform in [−10, 10]², Σ = I), train the
    two-layer MLP with CE for ``epochs`` epochs on ``n_train_per_class`` points per class, and
    on ``n_test_per_class`` test points per class correlate u_FL, u_DFL, u_gBS with
    ``true_calibration_error(p̂, η, error)`` at every grid point. The grid point with the
    highest mean r over seeds is reported::

        {"FL": {"r_mean", "r_std", "r_per_seed", "best_params", "grid", "accuracy"},
         "DFL": ..., "gBS": ...}

    ``grid`` lists mean r for every grid point; ``accuracy`` the test accuracy per seed.
    ``depth`` (hidden layers), ``hidden`` (width), ``epochs`` and ``lr`` are the open
    choices of the network and its training; :func:`toy_ordering_study` varies them.
    In smoke mode (``CALIB_SMOKE=1``) the point counts and epochs are capped.
    Paper (Lin et al. 2024, §4.3): FL 0.550, DFL 0.638, gBS 0.664 (:data:`PAPER_TOY_CORRELATION`).
    """
    seeds = [check_positive_int(s, "seeds", minimum=0) for s in seeds]
    if not seeds:
        raise ValueError("seeds must hold at least one seed")
    for name, v in (("epochs", epochs), ("n_train_per_class", n_train_per_class), ("hidden", hidden),
                    ("depth", depth)):
        check_positive_int(v, name)
    check_positive_int(n_test_per_class, "n_test_per_class", minimum=2)
    if error not in ERRORS:
        raise ValueError(f"error must be one of {ERRORS}, got {error!r}")
    grid = _check_grid(grid)
    # CALIB_SMOKE=1: the same code path on a few hundred points (calib.profile.smoke_cap)
    n_train_per_class = profile.smoke_cap("toy_points_per_class", n_train_per_class)
    n_test_per_class = profile.smoke_cap("toy_points_per_class", n_test_per_class)
    epochs = profile.smoke_cap("epochs", epochs)
    runs = [_one_seed(s, n_train_per_class, n_test_per_class, hidden, epochs, grid, error, device, depth, lr)
            for s in seeds]
    accuracy = [acc for _, acc in runs]
    return {name: _best(name, [r for r, _ in runs], accuracy) for name in grid}


def _best(name: str, runs: list[dict[str, list[tuple[dict[str, float], float]]]], accuracy: list[float]) -> dict[str, Any]:
    points = [pt for pt, _ in runs[0][name]]
    table = np.array([[r for _, r in run[name]] for run in runs])  # (seeds, grid points)
    means = np.nanmean(table, axis=0) if np.isfinite(table).any() else np.full(len(points), np.nan)
    best = int(np.nanargmax(means))
    per_seed = table[:, best]
    return {
        "r_mean": float(per_seed.mean()),
        "r_std": float(per_seed.std(ddof=1)) if len(per_seed) > 1 else 0.0,
        "r_per_seed": [float(v) for v in per_seed],
        "best_params": points[best],
        "grid": [(pt, float(m)) for pt, m in zip(points, means)],
        "accuracy": accuracy,
    }


#: A smaller grid than :data:`DEFAULT_GRID` (integer gamma, Euclidean gBS): one of the
#: "grid-searched hyper-parameters" a reader might have used instead.
NARROW_GRID: dict[str, dict[str, tuple[float, ...]]] = {
    "FL": {"gamma": (1.0, 2.0, 3.0)},
    "DFL": {"gamma": (1.0, 2.0, 3.0)},
    "gBS": {"gamma": (1.0, 2.0, 3.0), "norm": (2.0,)},
}


def ordering(r: dict[str, float]) -> str:
    """The weights sorted by decreasing correlation, e.g. ``"gBS > DFL > FL"``."""
    return " > ".join(sorted(r, key=lambda n: -r[n]))


def _mean_best(per_seed: list[dict[str, list[tuple[dict[str, float], float]]]]) -> dict[str, float]:
    """Best grid point by mean r over seeds, per weight (as :func:`toy_weight_correlation`)."""
    out = {}
    for name in per_seed[0]:
        table = np.array([[r for _, r in run[name]] for run in per_seed])
        out[name] = float(np.nanmax(np.nanmean(table, axis=0)))
    return out


def toy_ordering_study(networks: Sequence[dict[str, int | float]], seeds: Iterable[int] = (0, 1, 2),
                       errors: Sequence[str] = ERRORS,
                       grids: dict[str, dict[str, dict[str, Sequence[float]]]] | None = None,
                       n_train_per_class: int = 2000, n_test_per_class: int = 400,
                       device: torch.device | str | None = None) -> list[dict[str, Any]]:
    """Which open choices of Lin et al. (2024, §4.3) change the ranking of the weights?

    For each network setting in ``networks`` (keyword arguments of
    :func:`toy_predictions`: ``hidden``, ``depth``, ``epochs``, ``lr``) and each seed,
    train once; then for each definition of the error in ``errors`` and each grid in
    ``grids`` (default: ``{"default": DEFAULT_GRID, "narrow": NARROW_GRID}``) compute the
    best mean correlation of FL, DFL and gBS over the seeds and their ordering. Returns one
    row per (network, error, grid): the network's settings, ``error``, ``grid``, ``FL``,
    ``DFL``, ``gBS`` (mean best r), ``order``, ``paper_order`` (whether it is the paper's
    ``gBS > DFL > FL``) and ``accuracy`` (mean test accuracy).
    """
    seeds = [check_positive_int(s, "seeds", minimum=0) for s in seeds]
    if not seeds:
        raise ValueError("seeds must hold at least one seed")
    if not networks:
        raise ValueError("networks must hold at least one setting")
    for e in errors:
        if e not in ERRORS:
            raise ValueError(f"errors must be some of {ERRORS}, got {e!r}")
    grids = {"default": DEFAULT_GRID, "narrow": NARROW_GRID} if grids is None else grids
    grids = {k: _check_grid(g) for k, g in grids.items()}
    paper_order = ordering(PAPER_TOY_CORRELATION)
    rows = []
    for net in networks:
        runs = [toy_predictions(s, n_train_per_class, n_test_per_class, device=device, **net) for s in seeds]
        acc = float(np.mean([float((p.argmax(1) == y).double().mean()) for p, y, _ in runs]))
        for error in errors:
            for gname, grid in grids.items():
                best = _mean_best([weight_correlations(p, y, e, grid, error) for p, y, e in runs])
                order = ordering(best)
                rows.append({**net, "error": error, "grid": gname, **best, "order": order,
                             "paper_order": order == paper_order, "accuracy": acc})
    return rows


#: The network settings of :func:`toy_ordering_study` in the Brier-score chapter: the default
#: two-layer MLP (width 64, 5 epochs, Adam lr 1e-3), an under-trained one (width 16, 1 epoch),
#: then one change at a time: width 8, two hidden layers, 20 epochs, lr 1e-2. The open
#: choices of Lin et al. 2024, §4.3 ("a two layer CNN", 5 epochs, no optimiser given).
STUDY_NETWORKS: tuple[dict[str, int | float], ...] = (
    {"hidden": 64, "depth": 1, "epochs": 5},
    {"hidden": 16, "depth": 1, "epochs": 1},
    {"hidden": 8, "depth": 1, "epochs": 5},
    {"hidden": 64, "depth": 2, "epochs": 5},
    {"hidden": 64, "depth": 1, "epochs": 20},
    {"hidden": 64, "depth": 1, "epochs": 5, "lr": 1e-2},
)


def network_label(setting: Mapping[str, Any]) -> str:
    """``"1x64, 5 ep"``: hidden layers x width and epochs, then ``", lr 0.01"`` when ``lr`` is set.

    A missing or NaN ``lr`` (the default 1e-3; NaN where a table row lacks it) is not shown.

    Raises:
        ValueError: ``setting`` lacks ``depth``, ``hidden`` or ``epochs``.
    """
    if missing := [k for k in ("depth", "hidden", "epochs") if k not in setting]:
        raise ValueError(f"setting lacks {missing}; it needs depth, hidden and epochs, got {dict(setting)!r}")
    label = f"{setting['depth']}x{setting['hidden']}, {setting['epochs']} ep"
    lr = setting.get("lr")
    return label if lr is None or lr != lr else f"{label}, lr {lr:g}"


def toy_correlation_table(result: Mapping[str, Mapping[str, Any]],
                      paper: Mapping[str, float] = PAPER_TOY_CORRELATION) -> Any:
    """:func:`toy_weight_correlation`'s result beside the paper's r, one row per weight (a DataFrame).

    Columns: ``"ours: r (mean ± sd)"`` (over seeds, at the best grid point), ``"ours: best
    parameters"`` and ``"Lin et al. (2024): r"`` (Lin et al. 2024, §4.3, 5 runs); rows in the
    order of ``paper``, index named ``"weight"``. pandas is imported here only.

    Raises:
        ValueError: ``result`` lacks a weight of ``paper``.
    """
    import pandas as pd

    if missing := [k for k in paper if k not in result]:
        raise ValueError(f"result lacks the weight(s) {missing} of paper")
    table = pd.DataFrame({
        "ours: r (mean ± sd)": {k: f"{result[k]['r_mean']:.3f} ± {result[k]['r_std']:.3f}" for k in paper},
        "ours: best parameters": {
            k: ", ".join(f"{a}={b:g}" for a, b in result[k]["best_params"].items()) for k in paper
        },
        "Lin et al. (2024): r": dict(paper),
    })
    table.index.name = "weight"
    return table


def toy_ordering_table(study: Sequence[Mapping[str, Any]]) -> Any:
    """:func:`toy_ordering_study`'s rows as one table row per (network, error) (a DataFrame).

    Columns: ``r FL``, ``r DFL``, ``r gBS`` (best mean r on the ``"default"`` grid), ``order
    (default grid)``, ``order (narrow grid)`` and ``test accuracy``; the index is
    (:func:`network_label`, error). pandas is imported here only.

    Raises:
        ValueError: ``study`` is empty or lacks the ``"default"`` or ``"narrow"`` grid.
    """
    import pandas as pd

    if len(study) == 0:
        raise ValueError("study must hold at least one row of toy_ordering_study")
    frame = pd.DataFrame(study)
    if missing := {"default", "narrow"} - set(frame["grid"]):
        raise ValueError(f"study lacks the grid(s) {sorted(missing)}; run toy_ordering_study with both")
    frame["network"] = [network_label(row) for row in study]
    by_grid = frame.set_index(["network", "error", "grid"])
    default = by_grid.xs("default", level="grid")
    return pd.DataFrame({
        **{f"r {w}": default[w] for w in ("FL", "DFL", "gBS")},
        "order (default grid)": default["order"],
        "order (narrow grid)": by_grid.xs("narrow", level="grid")["order"],
        "test accuracy": default["accuracy"],
    })
