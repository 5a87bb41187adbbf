"""Results folders to tidy tables: load the runs, check they are one suite and matched in compute,
group them, and the tables read straight off them (GPU figures, heavy-tailed signals)."""
