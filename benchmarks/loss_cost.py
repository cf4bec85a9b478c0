"""What each per-sample loss costs next to cross-entropy: forward + backward at K = 10, 100, 1000.

For each K the logits are ``(N, K)`` float32 with ``N·K`` from 1.6·10⁵ to 4·10⁵ (a call of
``F.cross_entropy`` forward + backward takes about a millisecond on one thread) and hard
integer labels. Every loss of :func:`calib.losses.names` but the batch-level objectives
(O(N²) by design; ``benchmarks/losses.py`` times them) is timed in rounds alternating with
``torch.nn.functional.cross_entropy`` on the same logits, and the table prints the median of
the per-round ratios (CPU time of this process, so other jobs on the machine disturb it
little). Targets (issue 43): the losses that read only the label's probability at most
1.5x cross-entropy, those that need more of the softmax (dual focal's runner-up, the Brier
weight, the entropy, every logit for label smoothing and the logit norm) at most 2.5x. Where torch-uncertainty is installed its focal loss is
timed too, and calib's focal loss is shown as a ratio to it.

Run: ``python benchmarks/loss_cost.py`` (``--quick``: fewer rounds; ``--only focal,flsd53``:
those losses; ``--k 100``: that K). Set ``OMP_NUM_THREADS=1`` for the one-thread figures.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _timing import header, interleaved_times, paired_ratio  # noqa: E402

from calib import losses  # noqa: E402

SHAPES = ((16_384, 10), (4_096, 100), (512, 1_000))
#: Losses that need more of the softmax than the label's probability (target 2.5x; the rest 1.5x).
WIDE = {"dual_focal", "dual_focal_gra", "bsce", "bsce_gra", "brier", "entropy_reg", "label_smoothing", "logit_norm"}
TARGETS = {"true-class": 1.5, "wider": 2.5}


def _runner(fn: Callable[..., torch.Tensor], logits: torch.Tensor, y: torch.Tensor) -> Callable[[], None]:
    def step() -> None:
        logits.grad = None
        fn(logits, y).backward()

    return step


def _torch_uncertainty_focal() -> tuple[Callable[..., torch.Tensor] | None, str]:
    """torch-uncertainty's focal loss (γ = 3, mean) or None, and a line saying which."""
    try:
        import torch_uncertainty
        from torch_uncertainty.losses import FocalLoss
    except ImportError as exc:
        return None, f"torch-uncertainty not importable ({exc}); its column is left out"
    return FocalLoss(gamma=3.0), f"torch-uncertainty {getattr(torch_uncertainty, '__version__', '?')}"


def ratios(rounds: int, only: list[str] | None = None,
           shapes: tuple[tuple[int, int], ...] = SHAPES) -> tuple[dict[str, dict[int, float]], str]:
    """``{loss: {K: median per-round ratio to F.cross_entropy}}`` and a note on torch-uncertainty."""
    tu_focal, note = _torch_uncertainty_focal()
    names = [n for n in losses.names() if not losses.is_batch_level(n)] if only is None else only
    if "focal" not in names:
        tu_focal, note = None, "torch-uncertainty left out (its column compares focal loss)"
    table: dict[str, dict[int, float]] = {}
    for n, k in shapes:
        gen = torch.Generator().manual_seed(k)
        logits = (3 * torch.randn(n, k, generator=gen)).requires_grad_(True)
        y = torch.randint(0, k, (n,), generator=gen)
        fns = {"F.cross_entropy": _runner(F.cross_entropy, logits, y)}
        fns.update({name: _runner(losses.make(name), logits, y) for name in names})
        if tu_focal is not None:
            fns["torch-uncertainty focal"] = _runner(tu_focal, logits, y)
        times = interleaved_times(fns, rounds=rounds, warmup=2, clock=time.process_time)
        for name, ts in times.items():
            table.setdefault(name, {})[k] = paired_ratio(ts, times["F.cross_entropy"])[0]
        table.setdefault("(F.cross_entropy, ms)", {})[k] = 1e3 * sorted(times["F.cross_entropy"])[rounds // 2]
        if tu_focal is not None:
            table.setdefault("calib focal / torch-uncertainty focal", {})[k] = paired_ratio(
                times["focal"], times["torch-uncertainty focal"])[0]
    return table, note


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--only", help="comma-separated loss names (default: every per-sample loss)")
    parser.add_argument("--k", type=int, action="append", choices=[k for _, k in SHAPES],
                        help="time only this K (repeatable; default: all)")
    args = parser.parse_args(argv)
    only = None if args.only is None else [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = sorted(set(only or ()) - set(losses.names()))
    if unknown:
        parser.error(f"unknown loss(es) {', '.join(unknown)}; valid: {', '.join(losses.names())}")
    shapes = tuple((n, k) for n, k in SHAPES if args.k is None or k in args.k)
    header("calib.losses forward+backward, ratio to F.cross_entropy on the same (N, K) logits, hard labels, CPU")
    table, note = ratios(7 if args.quick else 21, only, shapes)
    ks = [k for _, k in shapes]
    print(f"shapes {', '.join(f'N={n:,} K={k:,}' for n, k in shapes)}; {note}")
    print(f"{'loss':<40}" + "".join(f"{f'K={k}':>10}" for k in ks) + "   target")
    for name, row in table.items():
        cells = "".join(f"{row[k]:9.2f}{'x' if not name.startswith('(') else ' '}" for k in ks)
        target = ""
        if name in losses.names():
            kind = "wider" if name in WIDE else "true-class"
            limit = TARGETS[kind]
            verdict = "ok" if max(row.values()) <= limit else "ABOVE"
            target = f"   <= {limit}x ({kind}): {verdict}"
        print(f"{name:<40}{cells}{target}")


if __name__ == "__main__":
    main()
