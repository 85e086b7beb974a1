"""The run engine: generators' registry, config, run folders, the runner and the Python API."""
