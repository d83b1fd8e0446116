"""Prometheus metrics of the worker and of the queues (the `prometheus` extra).

`hook` is what the worker calls where it decides an outcome: nothing is counted, and nothing
of prometheus_client is imported, unless `runworker --metrics-port` installed a recorder.
`worker` holds that recorder and the worker's HTTP endpoint; `views` serves the queue-wide
figures to a scraper from Django. docs/metrics.rst says what each metric means.
"""
