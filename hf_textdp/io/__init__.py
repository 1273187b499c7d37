"""The I/O layer: everything that touches files, folders, the hub cache and the on-disk cache.

Math modules (``mechanisms``, ``postprocess``, ``rng``, ``search``, ``bounding``, ``scale``, ``accounting``)
never import from here (an import-linter contract in ``pyproject.toml``); the pipeline, streaming and Ray
paths, the CLI and the privatizer do. One concept per module: ``models`` (resolve ``model=`` and load an
embedding space), ``vectors`` (word-vector files), ``frequencies`` (public token counts for santext_plus),
``sources`` (input datasets and files), ``outputs`` (atomic saves of outputs), ``workdir`` (work folders,
locks, manifests, resume), ``reports`` (reading saved privacy reports), ``paths`` (where each lives),
``files`` (atomic writes) and ``cache`` (derived public constants on disk).
"""
