"""Train a small ViT on CIFAR-10 rung by rung, then measure what its attention heads look at."""

__version__ = "0.1.0"
