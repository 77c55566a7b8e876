"""spark-submit entry points, one file per example projection plus `run.py NAME` for any declared one.

    PYSPARK_PYTHON=.venv/bin/python spark-submit \\
        --jars "$(ls .cache/jars/spark/*.jar | paste -sd, -)" \\
        projections/jobs/orders_current.py --available-now

Flags after the script are those of `outbox-projections run`. On a cluster, ship the project with
`--py-files` (a wheel or zip of `projections` and `bridge`) and use `--packages` for the connector and Delta.
"""
