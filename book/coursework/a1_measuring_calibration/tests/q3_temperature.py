from otter.test_files import test_case

OK_FORMAT = False

name = "q3_temperature"
points = None

@test_case(points=1, hidden=False, 
    failure_message="the sharpened model is over-confident: T > 1 and a lower ECE after scaling")
def test_direction(T_hat, ece_before, ece_after):
    assert T_hat > 1, 'an over-confident model needs T > 1'
    assert ece_after < ece_before

