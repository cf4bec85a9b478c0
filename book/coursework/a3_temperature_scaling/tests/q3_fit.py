from otter.test_files import test_case

OK_FORMAT = False

name = "q3_fit"
points = None

@test_case(points=1, hidden=False, 
    failure_message="the model is over-confident, so both temperatures exceed 1")
def test_over_confident(T_nll, T_grid):
    assert T_nll > 1 and T_grid > 1

