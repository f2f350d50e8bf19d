"""Developer tools beside the pipeline: the benchmark, the ladder's time estimate, the GPU check, the host-sync counter
and the version floors. They import the pipeline, which never imports them: scripts/ladder.py passes
``estimate.estimate_ladder`` to the ladder runner."""
