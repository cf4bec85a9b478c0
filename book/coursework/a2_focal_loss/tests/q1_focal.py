from otter.test_files import test_case

OK_FORMAT = False

name = "q1_focal"
points = None

@test_case(points=1, hidden=False, 
    failure_message="focal_loss returns a scalar, equal to the cross-entropy at gamma = 0")
def test_gamma_zero_is_ce(focal_loss, F, logits, targets):
    value = focal_loss(logits, targets, gamma=0.0)
    assert value.ndim == 0
    assert abs(float(value) - float(F.cross_entropy(logits, targets))) < 1e-09

@test_case(points=1, hidden=False, 
    failure_message="(1 - p)^gamma <= 1, so the focal loss is below the cross-entropy")
def test_focal_is_smaller_than_ce(focal_loss, F, logits, targets):
    ce = float(F.cross_entropy(logits, targets))
    assert float(focal_loss(logits, targets, gamma=2.0)) < ce

