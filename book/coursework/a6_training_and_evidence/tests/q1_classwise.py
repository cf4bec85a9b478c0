from otter.test_files import test_case

OK_FORMAT = False

name = "q1_classwise"
points = None

@test_case(points=1, hidden=False, 
    failure_message="one-hot probabilities of the true class give 0; values lie in [0, 1]")
def test_perfect_and_range(classwise_ece, np):
    y = np.arange(40) % 4
    assert classwise_ece(np.eye(4)[y], y) == 0.0
    value = classwise_ece(np.full((40, 4), 0.25), y)
    assert isinstance(value, float) and 0.0 <= value <= 1.0

