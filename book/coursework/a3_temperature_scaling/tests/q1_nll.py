from otter.test_files import test_case

OK_FORMAT = False

name = "q1_nll"
points = None

@test_case(points=1, hidden=False, 
    failure_message="fit_temperature_nll returns a positive float")
def test_positive_float(fit_temperature_nll, val_logits, val):
    t = fit_temperature_nll(val_logits, val.y)
    assert isinstance(t, float) and t > 0

@test_case(points=1, hidden=False, 
    failure_message="logits three times larger need a temperature three times larger")
def test_scale_equivariant(fit_temperature_nll, val_logits, val):
    t1 = fit_temperature_nll(val_logits, val.y)
    t3 = fit_temperature_nll(3 * val_logits, val.y)
    assert abs(t3 - 3 * t1) < 0.0001 * t3

