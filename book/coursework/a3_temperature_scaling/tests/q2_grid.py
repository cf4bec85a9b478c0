from otter.test_files import test_case

OK_FORMAT = False

name = "q2_grid"
points = None

@test_case(points=1, hidden=False, 
    failure_message="the result must be one of the grid's values")
def test_in_grid(fit_temperature_grid, GRID, val_logits, val):
    assert fit_temperature_grid(val_logits, val.y, GRID) in set(GRID.tolist())

