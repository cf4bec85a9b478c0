from otter.test_files import test_case

OK_FORMAT = False

name = "q2_gradient"
points = None

@test_case(points=1, hidden=False, 
    failure_message="one gradient row per sample, one entry per class")
def test_shape(weighted_ce_gradient, logits, targets):
    assert tuple(weighted_ce_gradient(logits, targets).shape) == tuple(logits.shape)

