from otter.test_files import test_case

OK_FORMAT = False

name = "q3_peak"
points = None

@test_case(points=1, hidden=False, 
    failure_message="the peak lies at a small probability and g there exceeds 1")
def test_peak_range(p_peak, g_peak):
    assert 0 < p_peak < 0.5 and g_peak > 1

