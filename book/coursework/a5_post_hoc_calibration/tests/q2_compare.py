from otter.test_files import test_case

OK_FORMAT = False

name = "q2_compare"
points = None

@test_case(points=1, hidden=False, 
    failure_message="p_vs and p_ts are test-split probabilities: one row per test point, rows summing to 1")
def test_probabilities(p_vs, p_ts, test, torch):
    for p in (p_vs, p_ts):
        assert p.shape == (len(test.y), 5)
        assert torch.allclose(p.sum(1), torch.ones(len(test.y), dtype=p.dtype))

