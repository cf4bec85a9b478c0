from otter.test_files import test_case

OK_FORMAT = False

name = "q2_factor"
points = None

@test_case(points=1, hidden=False, 
    failure_message="at gamma = 0 the focal loss is the cross-entropy, so g = 1")
def test_gamma_zero(gradient_factor, autograd_factor):
    assert abs(float(gradient_factor(0.3, 0.0)) - 1.0) < 1e-12
    assert abs(autograd_factor(0.3, 0.0) - 1.0) < 1e-09

@test_case(points=1, hidden=False, 
    failure_message="the autograd ratio and the closed form should agree to 1e-8")
def test_autograd_agrees(gradient_factor, autograd_factor):
    for p in (0.05, 0.3, 0.8):
        assert abs(autograd_factor(p, 2.0) - float(gradient_factor(p, 2.0))) < 1e-08

