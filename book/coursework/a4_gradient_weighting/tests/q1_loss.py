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
    failure_message="gamma 2, norm 1 on the three rows of the test: mean loss 1.729076")
def test_other_gamma_and_norm(bsce_gra_loss, torch):
    z = torch.tensor([[2.0, 1.0, 0.0], [0.0, 1.0, 2.0], [1.0, -1.0, 0.5]], dtype=torch.float64)
    value = bsce_gra_loss(z, torch.tensor([0, 1, 2]), gamma=2.0, norm=1.0)
    assert abs(float(value) - 1.729075632073) < 1e-09

