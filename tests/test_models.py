"""calib.models: registry, forward shapes, the features/classifier contract, parameter counts."""
from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

from calib import models

BIG = {"resnet50", "resnet110_bottleneck", "resnet50_tiny_imagenet", "wrn26_10", "densenet121"}


@functools.lru_cache(maxsize=None)
def built(name: str, num_classes: int = 10) -> nn.Module:
    """Build each model once per test session (the large ones take ~0.5 s)."""
    torch.manual_seed(0)
    kw = {"in_features": 3 * 16 * 16} if name == "mlp" else {}
    return models.make(name, num_classes, **kw).eval()


def test_names_cover_the_papers_models():
    expected = {"resnet20", "resnet32", "resnet56", "resnet110", "resnet18", "resnet50", "wrn26_10",
                "densenet121", "small_cnn", "mlp"}
    assert expected <= set(models.names())


@pytest.mark.parametrize("name", sorted(set(models.names())))
def test_forward_shape_and_features_contract(name):
    model = built(name)
    size = 16 if name in BIG else 32  # global pooling makes every conv net size-agnostic
    channels = 1 if name == "cnn5" else 3   # cnn5 is the Fashion-MNIST net: 1 channel by default
    x = torch.randn(2, channels, size, size) if name != "mlp" else torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        out = model(x)
        feats = model.features(x)
    assert out.shape == (2, 10) and out.dtype == torch.float32
    assert isinstance(model.classifier, nn.Linear) and model.classifier.out_features == 10
    assert feats.shape == (2, model.classifier.in_features)
    torch.testing.assert_close(out, model.classifier(feats))
    assert torch.isfinite(out).all()


# Published parameter counts. He et al. 2016, "Deep residual learning for image
# recognition", Table 6 (CIFAR-10): ResNet-20 0.27M, -32 0.46M, -56 0.85M, -110 1.7M.
@pytest.mark.parametrize("name,published,digits", [
    ("resnet20", 0.27, 2), ("resnet32", 0.46, 2), ("resnet56", 0.85, 2), ("resnet110", 1.7, 1),
])
def test_cifar_resnet_counts_match_he_et_al_table6(name, published, digits):
    assert round(models.count_parameters(built(name)) / 1e6, digits) == published


def _cifar_form(imagenet_count: int, stem_out: int, feat: int, stem_bn: bool = False) -> int:
    """Turn torchvision's ImageNet count (1000 classes, 7×7 stem) into the CIFAR form with 10 classes:
    swap the 7×7×3 stem for a 3×3×3 one (and drop a BN that only the ImageNet stem has) and the
    1000-way classifier for a 10-way one."""
    stem = (7 * 7 - 3 * 3) * 3 * stem_out + (2 * stem_out if stem_bn else 0)
    head = (feat * 1000 + 1000) - (feat * 10 + 10)
    return imagenet_count - stem - head


# torchvision model documentation (pytorch.org/vision/stable/models), "Params" column:
# resnet18 11,689,512; resnet50 25,557,032; densenet121 7,978,856 (ImageNet, 1000 classes).
# The CIFAR forms (3×3 stem, no max-pool) therefore have 11,173,962 / 23,520,842 / 6,956,298
# parameters for 10 classes, the "11.17M / 23.5M / 6.96M" quoted for the focal-loss code (004).
@pytest.mark.parametrize("name,imagenet,feat,stem_bn,expected", [
    ("resnet18", 11_689_512, 512, False, 11_173_962),
    ("resnet50", 25_557_032, 2048, False, 23_520_842),
    ("densenet121", 7_978_856, 1024, True, 6_956_298),
])
def test_imagenet_family_counts_match_torchvision_published(name, imagenet, feat, stem_bn, expected):
    assert _cifar_form(imagenet, 64, feat, stem_bn) == expected
    assert models.count_parameters(built(name)) == expected


@pytest.mark.parametrize("ours,theirs", [("resnet18", "resnet18"), ("resnet50", "resnet50"),
                                         ("densenet121", "densenet121")])
def test_conv_structure_equals_torchvision_except_the_stem(ours, theirs):
    """Same convolutions, in the same order, as torchvision's ImageNet model, bar the 7×7 stem."""
    import torchvision

    ref = getattr(torchvision.models, theirs)(weights=None)
    shapes = lambda m: [tuple(c.weight.shape) for c in m.modules() if isinstance(c, nn.Conv2d)]  # noqa: E731
    assert shapes(built(ours))[1:] == shapes(ref)[1:]
    assert shapes(built(ours))[0][2:] == (3, 3) and shapes(ref)[0][2:] == (7, 7)


def test_wrn26_10_count_matches_zagoruyko_komodakis():
    # Zagoruyko & Komodakis 2016, "Wide residual networks", Table 4: WRN-28-10 has 36.5M
    # parameters; 004's WRN-26-10 has the same convolutions (4 blocks per stage, k = 10).
    n = models.count_parameters(built("wrn26_10"))
    assert abs(n / 1e6 - 36.5) < 0.05
    assert built("wrn26_10").classifier.in_features == 640


def test_the_two_resnet110s_are_told_apart():
    """He et al.'s CIFAR ResNet-110 (Table 6: 1.7M) vs the focal-loss code's bottleneck
    "ResNet-110" behind Mukhoti et al. (2020)'s and Lin et al. (2024)'s ResNet-110 numbers.

    Count for the bottleneck net, by hand: the CIFAR-form ResNet-50 has 23,520,842 parameters
    (10 classes, checked above); ResNet-110 adds 20 bottleneck blocks to stage 3 (6 → 26), each
    1×1 1024→256, 3×3 256→256, 1×1 256→1024 convolutions plus BatchNorms of 256, 256, 1024:
    262,144 + 589,824 + 262,144 + 2·(256 + 256 + 1024) = 1,117,184 per block, so
    23,520,842 + 20 · 1,117,184 = 45,864,522 ≈ 45.9M.
    """
    assert models.count_parameters(built("resnet110_bottleneck")) == 23_520_842 + 20 * 1_117_184 == 45_864_522
    assert round(models.count_parameters(built("resnet110")) / 1e6, 1) == 1.7
    assert "1.7M" in models.DESCRIPTIONS["resnet110"] and "45.9M" in models.DESCRIPTIONS["resnet110_bottleneck"]
    assert "Mukhoti" in models.DESCRIPTIONS["resnet110_bottleneck"]
    assert set(models.DESCRIPTIONS) == set(models.names())
    assert "resnet110_bottleneck: " in models.describe()


def test_tiny_imagenet_resnet50_head_pools_to_2x2():
    """The focal-loss code's Tiny-ImageNet ResNet-50: the 8×8 map of a 64×64 input is pooled to
    2×2 and the classifier sees 4 · 2048 = 8192 features; with 200 classes that is
    23,520,842 − (2048·10 + 10) + (8192·200 + 200) = 25,138,952 parameters."""
    m = models.make("resnet50_tiny_imagenet", 200).eval()
    assert m.classifier.in_features == 8192
    assert models.count_parameters(m) == 23_520_842 - (2048 * 10 + 10) + (8192 * 200 + 200) == 25_138_952
    with torch.no_grad():
        assert m(torch.randn(1, 3, 64, 64)).shape == (1, 200)
        assert m.features(torch.randn(1, 3, 64, 64)).shape == (1, 8192)


def test_option_b_shortcuts_add_projection_parameters():
    a = models.count_parameters(models.make("resnet20", 10))
    b = models.count_parameters(models.make("resnet20", 10, shortcut="B"))
    # two 1×1 projections (16→32, 32→64) with their BatchNorms
    assert b - a == 16 * 32 + 2 * 32 + 32 * 64 + 2 * 64


def test_option_a_shortcut_zero_pads_and_subsamples():
    sc = models._PadShortcut(4, 8, 2)
    x = torch.randn(1, 4, 6, 6)
    y = sc(x)
    assert y.shape == (1, 8, 3, 3)
    torch.testing.assert_close(y[:, 2:6], x[:, :, ::2, ::2])
    assert (y[:, :2] == 0).all() and (y[:, 6:] == 0).all()


def test_num_classes_sets_output_width():
    m = models.make("resnet20", 100)
    assert m(torch.randn(1, 3, 32, 32)).shape == (1, 100)


def test_in_channels_and_small_inputs_for_digits():
    cnn = models.make("small_cnn", 10, in_channels=1, width=8)
    assert cnn(torch.randn(2, 1, 8, 8)).shape == (2, 10)
    mlp = models.make("mlp", 10, in_features=64, hidden=(32, 16))
    assert mlp.features(torch.randn(2, 1, 8, 8)).shape == (2, 16)
    assert models.make("mlp", 5, in_features=2, hidden=()).features(torch.randn(3, 2)).shape == (3, 2)


def test_channels_last_gives_the_same_outputs():
    m = built("resnet20")
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        ref = m(x)
        out = m.to(memory_format=torch.channels_last)(x.contiguous(memory_format=torch.channels_last))
    m.to(memory_format=torch.contiguous_format)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)


def test_every_parameter_gets_a_gradient():
    m = models.make("resnet20", 10).train()
    m(torch.randn(4, 3, 32, 32)).logsumexp(1).sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in m.parameters())


def test_seeded_construction_is_deterministic():
    torch.manual_seed(3)
    a = models.make("small_cnn", 10)
    torch.manual_seed(3)
    b = models.make("small_cnn", 10)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_unknown_name_lists_the_choices():
    with pytest.raises(ValueError, match="resnet20"):
        models.make("resnet21", 10)


@pytest.mark.parametrize("bad", [0, 1, -3])
def test_bad_num_classes(bad):
    with pytest.raises(ValueError, match="num_classes"):
        models.make("resnet20", bad)


@pytest.mark.parametrize("bad", [2.5, "10", True, None])
def test_non_int_num_classes(bad):
    with pytest.raises(ValueError, match="num_classes"):
        models.make("resnet20", bad)


def test_bad_keyword_arguments():
    with pytest.raises(TypeError, match="in_features"):
        models.make("mlp", 10)
    with pytest.raises(TypeError, match="resnet50"):
        models.make("resnet50", 10, width=3)
    with pytest.raises(ValueError, match="shortcut"):
        models.make("resnet20", 10, shortcut="C")
    with pytest.raises(ValueError, match="in_channels"):
        models.make("small_cnn", 10, in_channels=0)
    with pytest.raises(ValueError, match="hidden"):
        models.make("mlp", 10, in_features=4, hidden=(0,))
    with pytest.raises(ValueError, match="depth"):
        models.CifarResNet(21, 10)


def test_mlp_rejects_wrong_feature_count():
    with pytest.raises(ValueError, match="features"):
        models.make("mlp", 3, in_features=2)(torch.randn(4, 5))
