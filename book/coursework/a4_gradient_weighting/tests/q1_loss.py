from otter.test_files import test_case

OK_FORMAT = False

name = "q1_loss"
points = None

@test_case(points=1, hidden=False, 
    failure_message="per-sample losses 0.013215 and 1.467594 (gamma 4, norm 2), so the mean 0.740405")
def test_worked_example(bsce_gra_loss, torch):
    z = torch.tensor([[2.0, 1.0, 0.0], [0.0, 1.0, 2.0]], dtype=torch.float64)
    value = bsce_gra_loss(z, torch.tensor([0, 1]))
    assert value.ndim == 0
    assert abs(float(value) - (0.013215 + 1.467594) / 2) < 1e-05

@test_case(points=1, hidden=False, 
    failure_message="the value must match calib's BSCE-GRA for other gamma and norm too")
def test_value_matches_calib(bsce_gra_loss, losses, logits, targets):
    want = float(losses.bsce_gra_loss(logits, targets, gamma=2.0, norm=1.0))
    assert abs(float(bsce_gra_loss(logits, targets, gamma=2.0, norm=1.0)) - want) < 1e-09

