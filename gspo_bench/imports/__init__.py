"""Runs written by other libraries (TRL, verl, or any library a mapping file describes), turned into run
folders the analysis reads (`gspo-bench import PLAN.yaml --out OUT`: docs/import.md).

    mapping   a library's metric names -> this project's columns (YAML; the built-in ones: mappings/*.yaml)
    sources   trainer_state.json, TensorBoard event files and JSON lines -> (step, key, value) in write order
    series    those records -> one row per logged step, refusing repeated or backward steps unless resumed
    plan      the import plan file: suite name, mapping, compute per step, runs (arm, seed, files), family
    write     every run read and checked first, then the suite folder written whole (nothing half-written)

No torch: an import needs the run's logs only.
"""
