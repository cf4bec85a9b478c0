from otter.test_files import test_case

OK_FORMAT = False

name = "q3_fixed_point"
points = None

@test_case(points=1, hidden=False, 
    failure_message="the gradient weight pulls the fixed point well inside (0.5, eta); cross-entropy's is eta")
def test_between_half_and_eta(p_star, ETA):
    assert 0.5 < p_star < ETA - 0.01

