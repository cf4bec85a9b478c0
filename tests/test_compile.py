"""torch.compile(fullgraph=True) across hyper-parameter values and losses in one process.

A changed float argument is traced as a symbolic float on the recompile, so a check that
calls a plain-Python function on it (``math.isfinite``) breaks the graph on the *second*
value only; one call per loss cannot see that. The step here is compiled once and driven
through several γ and two losses, functional and module forms; backend "eager" traces with
dynamo exactly as inductor would (the graph breaks are dynamo's) without code generation.
"""
import pytest
import torch
from torch import nn
from torch._dynamo.utils import counters

from calib import losses as L

BATCH_LEVEL = {"mmce", "dece", "ce_dece", "sece", "ce_sece"}


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def _setup(seed=0, k=5):
    torch.manual_seed(seed)
    model = nn.Linear(8, k)
    x, y = torch.randn(16, 8), torch.randint(0, k, (16,))
    return model, torch.optim.SGD(model.parameters(), lr=0.1), x, y


def _trainer(model, opt, x, y):
    """A training step whose forward and loss run compiled with fullgraph=True."""

    @torch.compile(fullgraph=True, backend="eager")
    def forward(loss_fn, **kw):
        return loss_fn(model(x), y, **kw)

    def step(loss_fn, **kw):
        opt.zero_grad(set_to_none=True)
        loss = forward(loss_fn, **kw)
        loss.backward()
        opt.step()
        return loss.detach()

    return step


def _eager_loss(model, x, y, loss_fn, **kw):
    with torch.no_grad():
        return loss_fn(model(x), y, **kw)


def test_a_compiled_step_runs_through_three_gammas_and_a_second_loss():
    model, opt, x, y = _setup()
    step = _trainer(model, opt, x, y)
    seen = []
    for gamma in (3.0, 2.0, 0.5):  # the functional loss, gamma a call argument
        want = _eager_loss(model, x, y, L.focal_loss, gamma=gamma)
        got = step(L.focal_loss, gamma=gamma)
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-6), gamma
        seen.append(got)
    for name, kw in (("focal", {"gamma": 2.0}), ("focal", {"gamma": 1.0}), ("bsce_gra", {"gamma": 4.0}),
                     ("bsce_gra", {"gamma": 3.0, "norm": 1.0}), ("dual_focal", {"gamma": 5.0})):
        module = L.make(name, **kw)
        want = _eager_loss(model, x, y, module)
        got = step(module)
        assert torch.isfinite(got) and torch.allclose(got, want, rtol=1e-5, atol=1e-6), (name, kw)
    for gamma in (3.0, 2.0, 1.5):  # a module's forward(gamma=...) override
        step(L.make("focal"), gamma=gamma)
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    assert len(set(float(v) for v in seen)) == 3  # the parameters moved: each step trained


@pytest.mark.parametrize("name", sorted(set(L.names()) - BATCH_LEVEL))
def test_every_per_sample_loss_recompiles_across_its_hyper_parameters(name):
    fn = L.functional(name)
    x, y = torch.randn(8, 5), torch.randint(0, 5, (8,))
    compiled = torch.compile(fn, fullgraph=True, backend="eager")
    options = {"focal": "gamma", "dual_focal": "gamma", "inverse_focal": "gamma", "bsce": "gamma",
               "focal_gra": "gamma", "dual_focal_gra": "gamma", "bsce_gra": "gamma", "flsd53": "gamma_low",
               "flsd53_gra": "gamma_low", "label_smoothing": "epsilon", "logit_norm": "alpha", "entropy_reg": "alpha"}
    values = (0.3, 0.2, 0.1) if name in ("label_smoothing", "logit_norm", "entropy_reg") else (3.0, 2.0, 1.0)
    for value in values if name in options else (None,):
        kw = {} if value is None else {options[name]: value}
        assert torch.allclose(compiled(x, y, **kw), fn(x, y, **kw), rtol=1e-5, atol=1e-6), (name, kw)
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])


def test_a_compiled_loss_still_refuses_a_bad_hyper_parameter():
    """The range checks become guards: a negative γ after good ones is refused, not computed."""
    x, y = torch.randn(8, 5), torch.randint(0, 5, (8,))
    compiled = torch.compile(L.focal_loss, fullgraph=True, backend="eager")
    compiled(x, y, gamma=3.0)
    compiled(x, y, gamma=2.0)
    with pytest.raises(Exception, match="gamma must be a finite number >= 0"):
        compiled(x, y, gamma=-1.0)
