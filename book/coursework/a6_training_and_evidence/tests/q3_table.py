from otter.test_files import test_case

OK_FORMAT = False

name = "q3_table"
points = None

@test_case(points=1, hidden=False, 
    failure_message="one row per run, with T, ece, cw_ece, ece_ts and cw_ece_ts")
def test_shape(table, LOSSES, SEEDS):
    cols = {'loss', 'seed', 'T', 'ece', 'cw_ece', 'ece_ts', 'cw_ece_ts'}
    assert cols <= set(table.columns) and len(table) == len(LOSSES) * len(SEEDS)
    assert set(table['loss']) == set(LOSSES) and set(table['seed']) == set(SEEDS)

