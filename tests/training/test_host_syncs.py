"""No evaluation step makes the host wait for the device, counted on the CPU by the operators that sync on CUDA
(devtools/syncs.py); the training step is tests/training/test_scale.py's."""

from __future__ import annotations

import lightning as L
from run_helpers import module_for, set_up_data

from vitladder.devtools.syncs import HostSyncs


class SyncsPerBatch(L.Callback):
    """The host syncs of every validation and test batch, from the batch's start to its end (step and logging)."""

    def __init__(self, syncs: HostSyncs) -> None:
        self.syncs, self.per_batch = syncs, []

    def _start(self, *args) -> None:
        self.syncs.seen.clear()
        self.syncs.on = True

    def _end(self, *args) -> None:
        self.syncs.on = False
        self.per_batch.append(dict(self.syncs.seen))

    on_validation_batch_start = on_test_batch_start = _start
    on_validation_batch_end = on_test_batch_end = _end


def test_an_evaluation_step_makes_no_host_sync(tiny_cfg):
    # 200 validation and 200 test images in batches of 64: three full batches and a partial one each.
    cfg = tiny_cfg("mixup_cutmix", "model.depth=1", "data.eval_batch_size=64")
    datamodule = set_up_data(cfg)
    with HostSyncs() as syncs:
        recorder = SyncsPerBatch(syncs)
        trainer = L.Trainer(
            accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False, callbacks=[recorder]
        )
        module = module_for(cfg)
        trainer.validate(module, datamodule=datamodule, verbose=False)
        trainer.test(module, datamodule=datamodule, verbose=False)
    assert recorder.per_batch == [{}] * 8  # MeanMetric's NaN checks and a Python weight were 3 per step
