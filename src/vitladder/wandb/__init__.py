"""Everything the project does with Weights & Biases, over plain data (configs, rows, paths, figures) from the layers
above: its runs and their modes (``run``), artifacts and lineage (``artifacts``), a run's final analysis
(``analysis``) and the ladder's report run and saved Report (``report``). Inside it, ``import wandb`` is the
library."""
