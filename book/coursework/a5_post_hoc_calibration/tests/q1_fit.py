from otter.test_files import test_case

OK_FORMAT = False

name = "q1_fit"
points = None

@test_case(points=1, hidden=False, 
    failure_message="fit_vector_scaling returns two float64 tensors of shape (K,)")
def test_shapes(fit_vector_scaling, val_logits, val, torch):
    w, b = fit_vector_scaling(val_logits, val.y)
    assert w.shape == b.shape == (5,)
    assert w.dtype == b.dtype == torch.float64

@test_case(points=1, hidden=False, 
    failure_message="the fit must not be worse than no calibration (w = 1, b = 0) on its own data")
def test_lowers_validation_nll(fit_vector_scaling, val_logits, val, torch, F):
    w, b = fit_vector_scaling(val_logits, val.y)
    assert F.cross_entropy(val_logits * w + b, val.y) < F.cross_entropy(val_logits, val.y)

