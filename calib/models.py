"""The networks of the five papers, behind one registry: ``calib.models.make(name, num_classes)``.

Every model is a :class:`Classifier`: ``features(x)`` returns the penultimate
representation ``(B, d)`` and ``classifier`` is the final ``nn.Linear(d, K)``, with
``forward(x) = classifier(features(x))``. gamma-Net (Wang & Golebiowski 2024, §3) reads
``features``; the overconfidence chapter (Mukhoti et al. 2020, §3, Fig. 2) tracks the norm
of ``classifier.weight``.

==========================  ====================================================  ==========
name                        architecture                                          params*
==========================  ====================================================  ==========
resnet20/32/56/110          He et al. 2016 §4.2 CIFAR ResNets 6n+2, widths        0.27M / 0.46M /
                            16/32/64, option-A (parameter-free) shortcuts         0.85M / 1.7M
resnet18, resnet50          ImageNet ResNets in CIFAR form (3×3 stem, no          11.17M / 23.52M
                            max-pool), as in Mukhoti et al. (2020)'s code
resnet110_bottleneck        what Mukhoti et al. (2020)'s code calls ResNet-110    45.9M
                            (and the ResNet-110 of their and Lin et al.
                            (2024)'s tables): the CIFAR-form ImageNet ResNet
                            with bottleneck blocks [3, 4, 26, 3]
resnet50_tiny_imagenet      that code's Tiny-ImageNet ResNet-50: resnet50 with    25.14M
                            the last map pooled to 2×2 (8192 features)            (200 cl.)
wrn26_10                    WideResNet-26-10 (Zagoruyko & Komodakis 2016) in      36.5M
                            Mukhoti et al. (2020)'s form: 4 basic blocks per
                            stage, widths 160/320/640
densenet121                 DenseNet-BC-121 (Huang et al. 2017) in CIFAR form:    6.96M
                            3×3 stem with 64 channels, growth 32
small_cnn                   three 3×3 conv blocks + global pooling (quick
                            profile)
cnn5                        five 3×3 conv-BN-ReLU blocks, widths w/2w/4w/4w/4w,   98k
                            max-pools after the 1st and 2nd, global pooling:      (w = 16)
                            the Fashion-MNIST (1×28×28) net of the quick profile
mlp                         fully connected ReLU network (toy data, Lin et al.
                            (2024) §4.3)
==========================  ====================================================  ==========

Two different nets are called "ResNet-110" in the literature: ``resnet110`` is He et al.'s
1.7M-parameter CIFAR net (Wang et al. (2021) use it); ``resnet110_bottleneck`` is the
45.9M-parameter net behind the ResNet-110 numbers of Mukhoti et al. (2020) and Lin et al.
(2024). :data:`DESCRIPTIONS` says the same in one line per name (``python -m calib train
--help``); ``calib.experiments.papers.PAPER_MODELS`` maps each paper's network to its registry name.

\\* for 10 classes and 3 input channels (``cnn5``: 1); ``tests/test_models.py`` checks them
against the published figures. Every conv net takes ``in_channels`` (1 for Fashion-MNIST:
``make("resnet20", 10, in_channels=1)``) and any input size, thanks to global pooling.
"""
from __future__ import annotations

import inspect
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import check_positive_int

__all__ = ["Classifier", "make", "names", "describe", "DESCRIPTIONS", "count_parameters", "CifarResNet", "ResNet",
           "WideResNet",
           "DenseNet", "SmallCNN", "CNN5", "MLP"]

Tensor = torch.Tensor


class Classifier(nn.Module):
    """Base class: ``forward(x) = classifier(features(x))``; subclasses define ``features``."""

    classifier: nn.Linear

    def features(self, x: Tensor) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.features(x))


def count_parameters(model: nn.Module, trainable_only: bool = True) -> int:
    """Number of (trainable) parameters of ``model``."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def _init(model: nn.Module) -> None:
    """He-normal convolutions (He et al. 2015, as Mukhoti et al. (2020)'s code: N(0, 2 / (k² · C_out))), unit BN."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


def _conv3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


def _projection(cin: int, cout: int, stride: int) -> nn.Sequential:
    """Option-B shortcut: 1×1 convolution + BN where the shape changes."""
    return nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))


class _PadShortcut(nn.Module):
    """Option-A shortcut (He et al. 2016 §4.2): subsample by ``stride``, zero-pad new channels."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.extra, self.stride = cout - cin, stride

    def forward(self, x: Tensor) -> Tensor:
        x = x[:, :, :: self.stride, :: self.stride]
        return F.pad(x, (0, 0, 0, 0, self.extra // 2, self.extra - self.extra // 2))


class _Basic(nn.Module):
    """Post-activation basic block: relu(bn(conv(relu(bn(conv(x))))) + shortcut(x))."""

    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int = 1, shortcut: str = "B") -> None:
        super().__init__()
        self.conv1, self.bn1 = _conv3(cin, planes, stride), nn.BatchNorm2d(planes)
        self.conv2, self.bn2 = _conv3(planes, planes), nn.BatchNorm2d(planes)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != planes:
            self.shortcut = _PadShortcut(cin, planes, stride) if shortcut == "A" else _projection(cin, planes, stride)

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class _Bottleneck(nn.Module):
    """Bottleneck block 1×1 → 3×3 (stride) → 1×1 with 4× expansion and projection shortcut."""

    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int = 1, shortcut: str = "B") -> None:
        super().__init__()
        cout = planes * self.expansion
        self.conv1, self.bn1 = nn.Conv2d(cin, planes, 1, bias=False), nn.BatchNorm2d(planes)
        self.conv2, self.bn2 = _conv3(planes, planes, stride), nn.BatchNorm2d(planes)
        self.conv3, self.bn3 = nn.Conv2d(planes, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = _projection(cin, cout, stride)

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        return F.relu(self.bn3(self.conv3(out)) + self.shortcut(x))


def _stage(block: type, cin: int, planes: int, blocks: int, stride: int, shortcut: str) -> tuple[nn.Sequential, int]:
    layers = []
    for i in range(blocks):
        layers.append(block(cin, planes, stride if i == 0 else 1, shortcut))
        cin = planes * block.expansion
    return nn.Sequential(*layers), cin


class _StagedNet(Classifier):
    """stem (3×3 conv, BN, ReLU) → stages → global average pooling → linear."""

    def __init__(self, block: type, blocks: Sequence[int], widths: Sequence[int], num_classes: int,
                 in_channels: int, shortcut: str, stem: int | None = None, pool: int = 1) -> None:
        super().__init__()
        self.pool = check_positive_int(pool, "pool")
        cin = widths[0] if stem is None else stem
        self.stem = nn.Sequential(_conv3(in_channels, cin), nn.BatchNorm2d(cin), nn.ReLU(inplace=True))
        stages = []
        for i, (n, w) in enumerate(zip(blocks, widths)):
            stage, cin = _stage(block, cin, w, n, 1 if i == 0 else 2, shortcut)
            stages.append(stage)
        self.stages = nn.Sequential(*stages)
        self.classifier = nn.Linear(cin * self.pool**2, num_classes)
        _init(self)

    def features(self, x: Tensor) -> Tensor:
        return torch.flatten(F.adaptive_avg_pool2d(self.stages(self.stem(x)), self.pool), 1)


class CifarResNet(_StagedNet):
    """He et al. 2016 §4.2 CIFAR ResNet with depth 6n+2: three stages of n basic blocks.

    Widths 16/32/64 on 32×32/16×16/8×8 maps. ``shortcut="A"`` (default) uses the paper's
    parameter-free identity shortcuts with zero-padded channels, which gives the paper's
    parameter counts (Table 6: 0.27M, 0.46M, 0.85M, 1.7M for n = 3, 5, 9, 18);
    ``shortcut="B"`` uses 1×1 projections where the shape changes.
    """

    def __init__(self, depth: int, num_classes: int, in_channels: int = 3, shortcut: str = "A") -> None:
        if (depth - 2) % 6 or depth < 8:
            raise ValueError(f"depth must be 6n + 2 with n >= 1 (20, 32, 56, 110, ...), got {depth}")
        if shortcut not in ("A", "B"):
            raise ValueError(f"shortcut must be 'A' or 'B', got {shortcut!r}")
        n = (depth - 2) // 6
        super().__init__(_Basic, [n] * 3, [16, 32, 64], num_classes, in_channels, shortcut)


class ResNet(_StagedNet):
    """ImageNet ResNet (He et al. 2016 Table 1) in the CIFAR form of Mukhoti et al. (2020)'s
    and Bohdal et al. (2021)'s code.

    A 3×3 stride-1 stem with 64 channels and no max-pool, then four stages of widths
    64/128/256/512 (strides 1, 2, 2, 2) with projection shortcuts and average pooling to
    ``pool × pool`` (1: global pooling). ResNet-18: basic blocks [2, 2, 2, 2]; ResNet-50:
    bottlenecks [3, 4, 6, 3]; the focal-loss code's "ResNet-110": bottlenecks [3, 4, 26, 3]
    (registry ``resnet110_bottleneck``, 45.9M parameters, *not* He et al.'s 1.7M CIFAR
    ResNet-110, which is :class:`CifarResNet` ``resnet110``). With ``pool=2`` the last map
    is pooled to 2×2 and the classifier sees ``4 · 2048`` features: the Tiny-ImageNet
    ResNet-50 head of that code (registry ``resnet50_tiny_imagenet``).
    """

    def __init__(self, bottleneck: bool, blocks: Sequence[int], num_classes: int, in_channels: int = 3,
                 pool: int = 1) -> None:
        block = _Bottleneck if bottleneck else _Basic
        super().__init__(block, blocks, [64, 128, 256, 512], num_classes, in_channels, "B", pool=pool)


class WideResNet(_StagedNet):
    """WideResNet-d-k (Zagoruyko & Komodakis 2016) as trained in Mukhoti et al. (2020)'s code.

    Stem 3×3 conv with 16 channels, three stages of ``(depth - 2) / 6`` basic blocks of
    widths 16k/32k/64k (strides 1, 2, 2), projection shortcuts, global pooling. Their
    "WRN-26-10" is this with 4 blocks per stage, the convolutions of the paper's
    WRN-28-10 (36.5M parameters, Zagoruyko & Komodakis Table 4); the blocks are
    post-activation (conv-BN-ReLU) as in that code rather than the paper's BN-ReLU-conv.
    """

    def __init__(self, depth: int, width: int, num_classes: int, in_channels: int = 3) -> None:
        if (depth - 2) % 6 or depth < 8:
            raise ValueError(f"depth must be 6n + 2 with n >= 1 (e.g. 26), got {depth}")
        width = check_positive_int(width, "width")
        n = (depth - 2) // 6
        super().__init__(_Basic, [n] * 3, [16 * width, 32 * width, 64 * width], num_classes, in_channels, "B",
                         stem=16)


class _DenseLayer(nn.Module):
    """BN-ReLU-1×1 conv (4k) - BN-ReLU-3×3 conv (k), concatenated to the input (DenseNet-B)."""

    def __init__(self, cin: int, growth: int) -> None:
        super().__init__()
        self.bn1, self.conv1 = nn.BatchNorm2d(cin), nn.Conv2d(cin, 4 * growth, 1, bias=False)
        self.bn2, self.conv2 = nn.BatchNorm2d(4 * growth), _conv3(4 * growth, growth)

    def forward(self, x: Tensor) -> Tensor:
        out = self.conv1(F.relu(self.bn1(x)))
        return torch.cat([x, self.conv2(F.relu(self.bn2(out)))], 1)


def _transition(cin: int, cout: int) -> nn.Sequential:
    """BN-ReLU-1×1 conv then 2×2 average pooling (compression to ``cout`` channels)."""
    return nn.Sequential(nn.BatchNorm2d(cin), nn.ReLU(inplace=True), nn.Conv2d(cin, cout, 1, bias=False),
                         nn.AvgPool2d(2))


class DenseNet(Classifier):
    """DenseNet-BC (Huang et al. 2017) in the CIFAR form of Mukhoti et al. (2020)'s code.

    A 3×3 stem with ``2·growth`` channels (no BN, no max-pool), dense blocks of
    ``blocks`` layers with growth ``growth``, transitions compressing by 0.5, then
    BN-ReLU and global average pooling. DenseNet-121: blocks [6, 12, 24, 16], growth 32,
    1024 features; its convolutions are torchvision's ``densenet121`` except the stem.
    """

    def __init__(self, blocks: Sequence[int], growth: int, num_classes: int, in_channels: int = 3) -> None:
        super().__init__()
        c = 2 * growth
        layers: list[nn.Module] = [_conv3(in_channels, c)]
        for i, n in enumerate(blocks):
            for _ in range(n):
                layers.append(_DenseLayer(c, growth))
                c += growth
            if i < len(blocks) - 1:
                layers.append(_transition(c, c // 2))
                c //= 2
        layers += [nn.BatchNorm2d(c), nn.ReLU(inplace=True)]
        self.body = nn.Sequential(*layers)
        self.classifier = nn.Linear(c, num_classes)
        _init(self)

    def features(self, x: Tensor) -> Tensor:
        return torch.flatten(F.adaptive_avg_pool2d(self.body(x), 1), 1)


class SmallCNN(Classifier):
    """Three conv-BN-ReLU blocks (widths w, 2w, 4w; 2×2 max-pool after the first two) and
    global average pooling: fast enough for the quick profile on CPU, any input size ≥ 4×4."""

    def __init__(self, num_classes: int, in_channels: int = 3, width: int = 32) -> None:
        super().__init__()
        w = check_positive_int(width, "width")
        block = lambda a, b: [_conv3(a, b), nn.BatchNorm2d(b), nn.ReLU(inplace=True)]  # noqa: E731
        self.body = nn.Sequential(*block(in_channels, w), nn.MaxPool2d(2), *block(w, 2 * w), nn.MaxPool2d(2),
                                  *block(2 * w, 4 * w))
        self.classifier = nn.Linear(4 * w, num_classes)
        _init(self)

    def features(self, x: Tensor) -> Tensor:
        return torch.flatten(F.adaptive_avg_pool2d(self.body(x), 1), 1)


class CNN5(Classifier):
    """Five conv-BN-ReLU blocks (3×3, widths w, 2w, 4w, 4w, 4w) with 2×2 max-pooling after the
    first and second, then global average pooling and a linear layer.

    Built for Fashion-MNIST at the quick profile: on a 28×28 input the blocks work at 28, 14
    and 7 pixels (the three widest at 7), 5.5M multiply-adds per image; with ``width=16`` it
    has 98k parameters (10 classes, 1 channel). Pooling after the second and third blocks
    instead costs twice the compute for the same accuracy (87.8% vs 87.7% after 6 epochs
    on 10,000 images, one seed). Any input size ≥ 4×4.
    """

    def __init__(self, num_classes: int, in_channels: int = 1, width: int = 16) -> None:
        super().__init__()
        w = check_positive_int(width, "width")
        widths = [w, 2 * w, 4 * w, 4 * w, 4 * w]
        layers: list[nn.Module] = []
        cin = in_channels
        for i, cout in enumerate(widths):
            layers += [_conv3(cin, cout), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]
            if i in (0, 1):
                layers.append(nn.MaxPool2d(2))
            cin = cout
        self.body = nn.Sequential(*layers)
        self.classifier = nn.Linear(cin, num_classes)
        _init(self)

    def features(self, x: Tensor) -> Tensor:
        return torch.flatten(F.adaptive_avg_pool2d(self.body(x), 1), 1)


class MLP(Classifier):
    """Fully connected ReLU network ``in_features → hidden[0] → … → hidden[-1] → K``.

    Inputs with more than two dimensions are flattened. Lin et al. (2024, §4.3) use a two-layer network on
    the 2-D Gaussian mixture (``hidden=(h,)``). ``hidden=()`` is multinomial logistic
    regression (``features`` is then the flattened input).
    """

    def __init__(self, num_classes: int, in_features: int, hidden: int | Sequence[int] = 128) -> None:
        super().__init__()
        d = check_positive_int(in_features, "in_features")
        sizes = [hidden] if isinstance(hidden, int) else list(hidden)
        layers: list[nn.Module] = []
        for h in sizes:
            h = check_positive_int(h, "hidden")
            layers += [nn.Linear(d, h), nn.ReLU(inplace=True)]
            d = h
        self.body = nn.Sequential(*layers)
        self.in_features = in_features
        self.classifier = nn.Linear(d, num_classes)

    def features(self, x: Tensor) -> Tensor:
        x = torch.flatten(x, 1)
        if x.shape[1] != self.in_features:
            raise ValueError(f"x has {x.shape[1]} features per example but the MLP expects {self.in_features}")
        return self.body(x)


# --------------------------------------------------------------------------- registry
_REGISTRY: dict[str, Callable[..., Classifier]] = {
    "resnet20": lambda num_classes, in_channels=3, shortcut="A": CifarResNet(20, num_classes, in_channels, shortcut),
    "resnet32": lambda num_classes, in_channels=3, shortcut="A": CifarResNet(32, num_classes, in_channels, shortcut),
    "resnet56": lambda num_classes, in_channels=3, shortcut="A": CifarResNet(56, num_classes, in_channels, shortcut),
    "resnet110": lambda num_classes, in_channels=3, shortcut="A": CifarResNet(110, num_classes, in_channels, shortcut),
    "resnet18": lambda num_classes, in_channels=3: ResNet(False, [2, 2, 2, 2], num_classes, in_channels),
    "resnet50": lambda num_classes, in_channels=3: ResNet(True, [3, 4, 6, 3], num_classes, in_channels),
    "resnet110_bottleneck": lambda num_classes, in_channels=3: ResNet(True, [3, 4, 26, 3], num_classes, in_channels),
    "resnet50_tiny_imagenet": lambda num_classes, in_channels=3: ResNet(True, [3, 4, 6, 3], num_classes, in_channels,
                                                                         pool=2),
    "wrn26_10": lambda num_classes, in_channels=3: WideResNet(26, 10, num_classes, in_channels),
    "densenet121": lambda num_classes, in_channels=3: DenseNet([6, 12, 24, 16], 32, num_classes, in_channels),
    "small_cnn": lambda num_classes, in_channels=3, width=32: SmallCNN(num_classes, in_channels, width),
    "cnn5": lambda num_classes, in_channels=1, width=16: CNN5(num_classes, in_channels, width),
    "mlp": lambda num_classes, in_features, hidden=128: MLP(num_classes, in_features, hidden),
}


DESCRIPTIONS: dict[str, str] = {
    "resnet20": "He et al. (2016) CIFAR ResNet-20, 0.27M parameters",
    "resnet32": "He et al. (2016) CIFAR ResNet-32, 0.46M (Wang et al. 2021)",
    "resnet56": "He et al. (2016) CIFAR ResNet-56, 0.85M",
    "resnet110": "He et al. (2016) CIFAR ResNet-110, 1.7M (NOT the focal-loss papers' ResNet-110)",
    "resnet18": "ResNet-18 in CIFAR form, 11.2M (Wang & Golebiowski 2024)",
    "resnet50": "ResNet-50 in CIFAR form, 23.5M (Mukhoti et al. 2020; Lin et al. 2024)",
    "resnet110_bottleneck": "the focal-loss code's bottleneck 'ResNet-110', 45.9M: the ResNet-110 of "
                            "Mukhoti et al. (2020) and Lin et al. (2024)",
    "resnet50_tiny_imagenet": "ResNet-50 with the 2x2-pooled head of the focal-loss code, their "
                              "Tiny-ImageNet net",
    "wrn26_10": "WideResNet-26-10, 36.5M (Mukhoti et al. 2020; Lin et al. 2024)",
    "densenet121": "DenseNet-BC-121 in CIFAR form, 7.0M (Mukhoti et al. 2020; Lin et al. 2024)",
    "small_cnn": "three conv blocks + global pooling (quick profile)",
    "cnn5": "five conv-BN-ReLU blocks, 98k parameters at width 16: the Fashion-MNIST net (1 channel by default)",
    "mlp": "fully connected ReLU net (toy data; needs in_features=)",
}
"""One line per registry name: which network it is and whose tables it reproduces."""


def describe() -> str:
    """``name: description`` lines for every model (the CLI's ``--model`` help)."""
    return "; ".join(f"{name}: {DESCRIPTIONS[name]}" for name in names())


def names() -> list[str]:
    """Model names :func:`make` accepts."""
    return sorted(_REGISTRY)


def make(name: str, num_classes: int, **kw: object) -> Classifier:
    """Build model ``name`` with ``num_classes`` outputs.

    Keyword arguments: ``in_channels`` (conv nets, default 3; cnn5: 1), ``shortcut`` ("A"/"B",
    resnet20-110), ``width`` (small_cnn, cnn5), ``in_features`` (required) and ``hidden``
    (mlp). Unknown names or arguments raise ``ValueError``/``TypeError`` listing the options.
    """
    if not isinstance(name, str) or name.lower() not in _REGISTRY:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(names())}")
    if isinstance(num_classes, bool) or not isinstance(num_classes, int):
        raise ValueError(f"num_classes must be an int >= 2, got {num_classes!r}")
    if num_classes < 2:
        raise ValueError(f"num_classes must be >= 2, got {num_classes}")
    factory = _REGISTRY[name.lower()]
    try:
        inspect.signature(factory).bind(num_classes, **kw)
    except TypeError as exc:
        params = [p for p in inspect.signature(factory).parameters if p != "num_classes"]
        raise TypeError(f"make({name!r}, ...): {exc}; it takes {', '.join(params) or 'no other arguments'}") from None
    if "in_channels" in kw:
        check_positive_int(kw["in_channels"], "in_channels")
    return factory(num_classes, **kw)
