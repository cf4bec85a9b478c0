from otter.test_files import test_case

OK_FORMAT = False

name = "q4_verdict"
points = None

@test_case(points=1, hidden=False, 
    failure_message="return evidence.compare's Verdict, claim and direction passed on")
def test_returns_a_verdict(paired_verdict, table, evidence):
    v = paired_verdict(table, 'focal γ=3', 'CE', 'ece', 'focal below CE', direction='less')
    assert isinstance(v, evidence.Verdict) and v.claim == 'focal below CE'
    assert v.direction == 'less' and v.outcome in evidence.OUTCOMES

