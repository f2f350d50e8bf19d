"""Developer tools beside the training pipeline: the benchmark, the ladder's time estimate and the GPU check.

They measure the pipeline and so import from it (``training/``, ``data/``, ``model/``); the pipeline never imports
them. ``scripts/ladder.py`` alone passes ``estimate.estimate_ladder`` to the ladder runner. Every timed step goes
through ``timing.time_steps`` (or its ``StepClock`` where Lightning drives the loop).
"""
