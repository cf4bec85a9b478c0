from otter.test_files import test_case

OK_FORMAT = False

name = "q2_bins"
points = None

@test_case(points=1, hidden=False, 
    failure_message="three arrays of length n_bins whose counts add up to N")
def test_shapes(reliability_bins, test_probs, test_labels):
    counts, acc, conf = reliability_bins(test_probs, test_labels, n_bins=10)
    assert len(counts) == len(acc) == len(conf) == 10
    assert sum(counts) == len(test_labels)

