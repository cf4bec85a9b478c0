"""Losses in real training code: probability targets, ignored rows, class weights, (N, K, d1, ...)
shapes, reductions and torch.compile, with torch's cross-entropy as the reference."""
import pytest
import torch
import torch.nn.functional as F

from calib import losses as L

BATCH_LEVEL = {"mmce", "dece", "ce_dece", "sece", "ce_sece"}
PER_SAMPLE = sorted(set(L.names()) - BATCH_LEVEL)
FUNCTIONS = {name: L.registry._lookup(name)[0] for name in L.names()}


def _batch(n=12, k=5, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return 2 * torch.randn(n, k, generator=g, dtype=dtype), torch.randint(0, k, (n,), generator=g)


@pytest.mark.parametrize("name", PER_SAMPLE)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_one_hot_targets_give_the_integer_label_value_and_gradient(name, reduction):
    x, y = _batch()
    fn = FUNCTIONS[name]
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    hard, soft = fn(xa, y, reduction=reduction), fn(xb, F.one_hot(y, 5).double(), reduction=reduction)
    assert torch.allclose(hard, soft, atol=1e-10)
    hard.sum().backward()
    soft.sum().backward()
    assert torch.allclose(xa.grad, xb.grad, atol=1e-10)


@pytest.mark.parametrize("name", PER_SAMPLE)
def test_probability_targets_mix_the_label_losses(name):
    """Σ_k q_k ℓ_k: a mixup target λ e_a + (1 − λ) e_b gives λ ℓ_a + (1 − λ) ℓ_b, row by row."""
    x, a = _batch(seed=1)
    b = (a + 2) % 5
    fn, lam = FUNCTIONS[name], 0.3
    q = lam * F.one_hot(a, 5).double() + (1 - lam) * F.one_hot(b, 5).double()
    want = lam * fn(x, a, reduction="none") + (1 - lam) * fn(x, b, reduction="none")
    assert torch.allclose(fn(x, q, reduction="none"), want, atol=1e-10)


@pytest.mark.parametrize("name", PER_SAMPLE)
def test_ignored_rows_drop_out(name):
    x, y = _batch(seed=2)
    y_ignored = y.clone()
    y_ignored[[1, 4, 7]] = -100
    kept = y_ignored != -100
    fn = FUNCTIONS[name]
    for reduction in ("mean", "sum"):
        assert torch.allclose(fn(x, y_ignored, reduction=reduction), fn(x[kept], y[kept], reduction=reduction))
    rows = fn(x, y_ignored, reduction="none")
    assert (rows[~kept] == 0).all() and torch.allclose(rows[kept], fn(x[kept], y[kept], reduction="none"))
    y255 = torch.where(kept, y, 255)
    assert torch.allclose(fn(x, y255, ignore_index=255), fn(x[kept], y[kept]))


@pytest.mark.parametrize("name", PER_SAMPLE)
def test_class_weights_follow_torch(name):
    """Integer labels: Σ w_y ℓ / Σ w_y (mean) and Σ w_y ℓ (sum); probability targets: Σ_k w_k q_k ℓ_k."""
    x, y = _batch(seed=3)
    w = torch.tensor([1.0, 2.0, 0.5, 0.0, 3.0], dtype=torch.float64)
    fn = FUNCTIONS[name]
    rows = fn(x, y, reduction="none")
    assert torch.allclose(fn(x, y, weight=w, reduction="none"), w[y] * rows)
    assert torch.allclose(fn(x, y, weight=w, reduction="sum"), (w[y] * rows).sum())
    assert torch.allclose(fn(x, y, weight=w), (w[y] * rows).sum() / w[y].sum())
    q = torch.softmax(torch.randn(12, 5, dtype=torch.float64), 1)
    each = torch.stack([fn(x, torch.full_like(y, k), reduction="none") for k in range(5)], 1)
    assert torch.allclose(fn(x, q, weight=w, reduction="none"), (q * w * each).sum(1))


@pytest.mark.parametrize("name", PER_SAMPLE)
def test_maps_are_rows(name):
    """(N, K, H, W) logits with (N, H, W) labels are the (N·H·W, K) rows, as torch's losses read them."""
    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(2, 5, 3, 4, generator=g, dtype=torch.float64), torch.randint(0, 5, (2, 3, 4), generator=g)
    rows, labels = x.movedim(1, -1).reshape(-1, 5), y.reshape(-1)
    fn = FUNCTIONS[name]
    assert torch.allclose(fn(x, y), fn(rows, labels))
    assert fn(x, y, reduction="none").shape == (2, 3, 4)
    assert torch.allclose(fn(x, y, reduction="none").reshape(-1), fn(rows, labels, reduction="none"))
    q = torch.softmax(torch.randn(2, 5, 3, 4, generator=g, dtype=torch.float64), 1)
    assert torch.allclose(fn(x, q), fn(rows, q.movedim(1, -1).reshape(-1, 5)))


def test_cross_entropy_is_torchs_in_every_mode():
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(4, 5, 6, generator=g), torch.randint(0, 5, (4, 6), generator=g)
    y[0, :2] = -100
    w = torch.rand(5, generator=g)
    q = torch.softmax(torch.randn(4, 5, 6, generator=g), 1)
    for reduction in ("none", "mean", "sum"):
        for target in (y, q):
            for weight in (None, w):
                ours = L.cross_entropy(x, target, reduction=reduction, weight=weight)
                assert torch.allclose(ours, F.cross_entropy(x, target, weight=weight, reduction=reduction))


# The *_gra losses' gradient is u·∇CE with u held constant, not the derivative of their
# value, so gradcheck does not apply; their gradients with every option follow from the
# one-hot and mixing tests above and tests/test_losses.py's u·∇CE checks.
@pytest.mark.parametrize("name", [n for n in PER_SAMPLE if not n.endswith("_gra")])
def test_gradients_with_every_option(name):
    g = torch.Generator().manual_seed(6)
    x = torch.randn(2, 4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    q = torch.softmax(torch.randn(2, 4, 3, generator=g, dtype=torch.float64), 1)
    y = torch.tensor([[0, 3, -100], [2, 1, 1]])
    w = torch.tensor([1.0, 0.5, 2.0, 1.5], dtype=torch.float64)
    fn = FUNCTIONS[name]
    assert torch.autograd.gradcheck(lambda z: fn(z, q, weight=w), (x,))
    assert torch.autograd.gradcheck(lambda z: fn(z, y, weight=w), (x,))


@pytest.mark.parametrize("name", L.names())
def test_compiles_without_graph_breaks(name):
    """fullgraph=True fails on any graph break (the value checks are skipped under compile)."""
    torch._dynamo.reset()
    x, y = _batch(n=8, dtype=torch.float32)
    fn = L.make(name)
    compiled = torch.compile(fn, fullgraph=True, backend="eager")
    assert torch.allclose(compiled(x, y), fn(x, y))


@pytest.mark.parametrize("name", sorted(BATCH_LEVEL))
def test_batch_level_objectives_refuse_what_they_cannot_mean(name):
    x, y = _batch()
    fn = FUNCTIONS[name]
    with pytest.raises(ValueError, match="integer class labels"):
        fn(x, F.one_hot(y, 5).double())
    with pytest.raises(ValueError, match="batch-level") as err:
        fn(x.view(12, 5, 1), y.view(12, 1))
    # issue 43: the message said "(a batch-level objective is a batch-level objective)"
    message = str(err.value)
    assert "one value of the whole batch" in message and "flatten the positions into rows" in message
    assert message.count("batch-level") == 1, message
    y[0] = -100
    with pytest.raises(ValueError, match="ignore_index"):
        fn(x, y)


def test_modules_carry_weight_and_ignore_index():
    x, y = _batch(seed=7)
    y[2] = 255
    w = torch.tensor([1.0, 2.0, 0.5, 1.0, 3.0])
    module = L.FocalLoss(gamma=2.0, weight=w, ignore_index=255)
    assert torch.allclose(module(x, y), L.focal_loss(x, y, gamma=2.0, weight=w, ignore_index=255))
    assert "weight" in module.state_dict() and "ignore_index=255" in repr(module)
    built = L.make("bsce_gra", gamma=4.0, norm=2.0, weight=w)
    assert torch.allclose(built(x, y.clamp(max=4)), L.bsce_gra_loss(x, y.clamp(max=4), weight=w))


def test_bad_targets_and_weights_say_what_is_wrong():
    x, y = _batch()
    with pytest.raises(TypeError, match="integer class indices"):
        L.focal_loss(x, y.double())
    with pytest.raises(ValueError, match="probability targets must have the logits' shape"):
        L.focal_loss(x, torch.rand(12, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="sum to 1"):
        L.focal_loss(x, torch.rand(12, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match="weight must be a float tensor of shape"):
        L.focal_loss(x, y, weight=torch.ones(4))
    with pytest.raises(ValueError, match="weight must be finite"):
        L.focal_loss(x, y, weight=-torch.ones(5))
    with pytest.raises(ValueError, match="targets must lie in"):
        L.focal_loss(x, torch.full_like(y, 7))


@pytest.mark.parametrize("name", [n for n in PER_SAMPLE if n.endswith("_gra")])
def test_gra_gradient_with_probability_targets_is_the_weighted_ce_gradient(name):
    """Σ_k q_k u_k ∇CE_k with every u_k held constant (Lin et al. (2024), Eq. 9, per class)."""
    x, _ = _batch(seed=8)
    q = torch.softmax(torch.randn(12, 5, dtype=torch.float64), 1)
    fn = FUNCTIONS[name]
    labels = [torch.full((12,), k) for k in range(5)]
    u = torch.stack([fn(x, t, reduction="none") / F.cross_entropy(x, t, reduction="none") for t in labels], 1)
    z = x.clone().requires_grad_()
    fn(z, q, reduction="sum").backward()
    ref = x.clone().requires_grad_()
    (q * u * -torch.log_softmax(ref, 1)).sum().backward()
    assert torch.allclose(z.grad, ref.grad, atol=1e-10)


def test_per_sample_gamma_with_probability_targets():
    x, y = _batch(seed=9)
    gamma = torch.linspace(0.5, 3.0, 12, dtype=torch.float64, requires_grad=True)
    soft = L.focal_loss(x, F.one_hot(y, 5).double(), gamma=gamma)
    assert torch.allclose(soft, L.focal_loss(x, y, gamma=gamma))
    soft.backward()
    assert gamma.grad is not None and torch.isfinite(gamma.grad).all()
