"""The benchmarks: ``python -m benchmarks.NAME``; they time what the programs run."""

import trainers  # noqa: F401  (its TensorFlow settings, made before TensorFlow is imported)
