"""The I/O layer: everything that touches files, folders and caches.

Math modules (``mechanisms``, ``postprocess``, ``rng``, ``search``, ``bounding``, ``accounting``) never
import from here; the pipeline, streaming and Ray paths, the CLI and the loaders do. Each module is one
concept: ``files`` (atomic writes, locks), ``paths`` (where outputs, reports and work folders live),
``sources`` (loading inputs), ``outputs`` (saving outputs, refusing to overwrite), ``workdir`` (a sharded
run's work folder: lock, manifest, resume), ``reports`` (reading saved reports), ``cache`` (the on-disk
cache of derived, public quantities).
"""
