"""Image corruptions at five severities, for calibration under dataset shift.

The protocol follows Ovadia et al. (2019), §4: evaluate a network trained on clean data on
test images corrupted at increasing intensity, and watch accuracy and calibration degrade.
Each corruption is a function ``(images, severity) -> images`` on ``uint8`` tensors
``(N, C, H, W)``: pure PyTorch, one call for the whole batch, on the images' device.
Severity 0 returns an unchanged copy; severities 1..5 follow these scales:

* ``gaussian_noise``: additive N(0, c²) on intensities in [0, 1], clipped, with
  c = 0.08, 0.12, 0.18, 0.26, 0.38, ImageNet-C's scale (the released
  ``gaussian_noise`` of Hendrycks & Dietterich (2019)). The standard deviation is relative to the intensity
  range, so it carries over to 28 × 28 images.
* ``gaussian_blur``: a Gaussian kernel of standard deviation σ = 0.4, 0.6, 0.7, 0.8, 1.0
  pixels, CIFAR-10-C's scale (Hendrycks & Dietterich (2019); σ is measured in pixels, and
  CIFAR's 32 × 32 is the published resolution closest to Fashion-MNIST's 28 × 28),
  truncated at 4σ, reflecting the border.
* ``rotation``: rotation about the image centre by 15°, 30°, 45°, 60°, 75°, the first five
  of Ovadia et al. (2019)'s 15° steps for rotated MNIST (§4.1), bilinear, the uncovered
  corners filled with 0 (Fashion-MNIST's background).

:func:`corrupt` dispatches by name; only the noise is random, drawn from a CPU generator
seeded by ``seed`` so the same seed gives the same images on any device.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["CORRUPTIONS", "SEVERITIES", "NOISE_STD", "BLUR_SIGMA", "ROTATION_DEGREES",
           "gaussian_noise", "gaussian_blur", "rotation", "rotate", "corrupt"]

SEVERITIES = (1, 2, 3, 4, 5)
NOISE_STD = (0.08, 0.12, 0.18, 0.26, 0.38)  # Hendrycks & Dietterich (2019), ImageNet-C
BLUR_SIGMA = (0.4, 0.6, 0.7, 0.8, 1.0)  # Hendrycks & Dietterich (2019), CIFAR-10-C
ROTATION_DEGREES = (15.0, 30.0, 45.0, 60.0, 75.0)  # Ovadia et al. (2019), §4.1: 15° steps


def _check_images(images: Tensor, name: str = "images") -> Tensor:
    if not isinstance(images, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(images).__name__}")
    if images.dtype != torch.uint8:
        raise TypeError(f"{name} must be uint8 images (N, C, H, W) in 0..255, got dtype {images.dtype}")
    if images.dim() != 4:
        raise ValueError(f"{name} must have shape (N, C, H, W), got {tuple(images.shape)}")
    return images


def _check_severity(severity: int) -> int:
    if isinstance(severity, bool) or not isinstance(severity, int):
        raise TypeError(f"severity must be an int in 0..5, got {type(severity).__name__}")
    if not 0 <= severity <= 5:
        raise ValueError(f"severity must lie in 0..5 (0 = clean), got {severity}")
    return severity


def _to_uint8(x: Tensor) -> Tensor:
    return (x * 255.0).round_().clamp_(0, 255).to(torch.uint8)


def gaussian_noise(images: Tensor, severity: int, *, seed: int = 0) -> Tensor:
    """``clip(x + ε, 0, 1)``, ε ~ N(0, c²) per pixel, c = :data:`NOISE_STD` [severity − 1].

    Hendrycks & Dietterich (2019), their released ImageNet-C code. Noise from a CPU generator
    seeded by ``seed``.
    """
    images, severity = _check_images(images), _check_severity(severity)
    if severity == 0:
        return images.clone()
    gen = torch.Generator().manual_seed(int(seed))
    noise = torch.randn(images.shape, generator=gen).to(images.device)
    return _to_uint8(images.float() / 255.0 + NOISE_STD[severity - 1] * noise)


def _kernel(sigma: float) -> Tensor:
    radius = max(1, math.ceil(4.0 * sigma))
    t = torch.arange(-radius, radius + 1, dtype=torch.float32)
    k = torch.exp(-0.5 * (t / sigma) ** 2)
    return k / k.sum()


def gaussian_blur(images: Tensor, severity: int) -> Tensor:
    """Separable Gaussian blur, ``σ`` = :data:`BLUR_SIGMA` [severity − 1] pixels.

    Kernel ``k(t) ∝ exp(−t² / 2σ²)`` on ``|t| <= ceil(4σ)``, normalised to sum 1, so the
    image mean is kept up to border effects (the border is reflected) and rounding.
    Hendrycks & Dietterich (2019), CIFAR-10-C's ``gaussian_blur`` scale.
    """
    images, severity = _check_images(images), _check_severity(severity)
    if severity == 0:
        return images.clone()
    n, c, h, w = images.shape
    k = _kernel(BLUR_SIGMA[severity - 1]).to(images.device)
    r = k.numel() // 2
    x = images.float().reshape(n * c, 1, h, w) / 255.0
    if min(h, w) <= r:
        raise ValueError(f"images of {h} x {w} pixels are too small for a blur of radius {r}")
    x = F.conv2d(F.pad(x, (r, r, 0, 0), mode="reflect"), k.view(1, 1, 1, -1))
    x = F.conv2d(F.pad(x, (0, 0, r, r), mode="reflect"), k.view(1, 1, -1, 1))
    return _to_uint8(x.reshape(n, c, h, w))


def rotate(images: Tensor, degrees: float) -> Tensor:
    """Rotate every image counter-clockwise by ``degrees`` about its centre (bilinear, zero fill).

    ``degrees`` = 0 (or a multiple of 360) returns an unchanged copy.
    """
    images = _check_images(images)
    if not isinstance(degrees, (int, float)) or isinstance(degrees, bool) or not math.isfinite(degrees):
        raise TypeError(f"degrees must be a finite number, got {degrees!r}")
    if degrees % 360.0 == 0.0:
        return images.clone()
    a = math.radians(degrees)
    # affine_grid maps output to input coordinates; y points down, so this turns the picture counter-clockwise
    theta = torch.tensor([[math.cos(a), -math.sin(a), 0.0], [math.sin(a), math.cos(a), 0.0]],
                         dtype=torch.float32, device=images.device)
    x = images.float() / 255.0
    grid = F.affine_grid(theta.expand(x.shape[0], 2, 3), list(x.shape), align_corners=False)
    return _to_uint8(F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False))


def rotation(images: Tensor, severity: int) -> Tensor:
    """:func:`rotate` by :data:`ROTATION_DEGREES` [severity − 1] (Ovadia et al. (2019), §4.1)."""
    severity = _check_severity(severity)
    return rotate(images, ROTATION_DEGREES[severity - 1] if severity else 0.0)


CORRUPTIONS: dict[str, Callable[..., Tensor]] = {
    "gaussian_noise": gaussian_noise, "gaussian_blur": gaussian_blur, "rotation": rotation}


def corrupt(name: str, images: Tensor, severity: int, *, seed: int = 0) -> Tensor:
    """Apply the corruption ``name`` (a key of :data:`CORRUPTIONS`) at ``severity`` (0..5).

    ``seed`` seeds the random corruptions (the noise) and is ignored by the others.
    """
    if name not in CORRUPTIONS:
        raise ValueError(f"unknown corruption {name!r}; choose one of {', '.join(CORRUPTIONS)}")
    fn = CORRUPTIONS[name]
    return fn(images, severity, seed=seed) if fn is gaussian_noise else fn(images, severity)
