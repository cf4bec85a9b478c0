from otter.test_files import test_case

OK_FORMAT = False

name = "q1_ece"
points = None

@test_case(points=1, hidden=False, 
    failure_message="a confident, always-right model has ECE 0 (and ece returns a float)")
def test_perfect(ece, np):
    probs = np.eye(3)[[0, 1, 2, 1]]
    assert isinstance(ece(probs, np.array([0, 1, 2, 1])), float)
    assert ece(probs, np.array([0, 1, 2, 1])) == 0.0

@test_case(points=1, hidden=False, 
    failure_message="two points in two bins: ECE = (|1 - 0.9| + |0 - 0.6|) / 2 = 0.35")
def test_two_points(ece, np):
    probs = np.array([[0.9, 0.1], [0.6, 0.4]])
    assert abs(ece(probs, np.array([0, 1])) - 0.35) < 1e-09

