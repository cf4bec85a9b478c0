from otter.test_files import test_case

OK_FORMAT = False

name = "q5_family"
points = None

@test_case(points=1, hidden=False, 
    failure_message="FAMILY holds the four verdicts")
def test_four_verdicts(FAMILY, evidence):
    assert len(FAMILY) == 4 and all((isinstance(v, evidence.Verdict) for v in FAMILY))

