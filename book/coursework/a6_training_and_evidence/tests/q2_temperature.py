from otter.test_files import test_case

OK_FORMAT = False

name = "q2_temperature"
points = None

@test_case(points=1, hidden=False, 
    failure_message="a positive float; logits three times larger need T three times larger")
def test_positive_and_scale_equivariant(fit_temperature, torch):
    g = torch.Generator().manual_seed(3)
    z = 3 * torch.randn(300, 5, generator=g, dtype=torch.float64)
    y = torch.multinomial(torch.softmax(z / 2, 1), 1, generator=g)[:, 0]
    t1, t3 = (fit_temperature(z, y), fit_temperature(3 * z, y))
    assert isinstance(t1, float) and t1 > 0
    assert abs(t3 - 3 * t1) < 0.0001 * t3

