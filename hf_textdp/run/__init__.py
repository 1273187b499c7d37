"""Running a privatizer over a dataset: the pipeline behind ``privatize_dataset``, its sharded (resumable) and
streaming runs, Ray Data, the per-row totals of a run, and the worker pool with its GPU release service."""
