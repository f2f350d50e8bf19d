"""The model of docs/design.md §1: a timm VisionTransformer for 32x32 images."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from timm.models.vision_transformer import VisionTransformer


@dataclass(frozen=True)
class ViTConfig:
    """Everything needed to rebuild the network from a checkpoint: VisionTransformer's arguments."""

    patch_size: int = 4
    embed_dim: int = 384
    depth: int = 7
    num_heads: int = 6
    mlp_ratio: float = 4.0
    drop_path_rate: float = 0.0
    num_classes: int = 10
    img_size: int = 32

    def to_dict(self) -> dict:
        return asdict(self)


# What a ViTConfig may ask for: generous for any ViT on small images (the project's is 12.5 M
# parameters), tight enough that a crafted checkpoint cannot make the loader allocate terabytes.
LIMITS: dict[str, tuple[float, float]] = {
    "patch_size": (1, 64),
    "embed_dim": (1, 4096),
    "depth": (1, 64),
    "num_heads": (1, 64),
    "mlp_ratio": (0.25, 16.0),
    "drop_path_rate": (0.0, 0.99),
    "num_classes": (1, 100_000),
    "img_size": (1, 1024),
}
MAX_TOKENS = 4096  # patches per image: attention maps grow with its square
MAX_PARAMETERS = 1_000_000_000  # ViT-Huge has 0.63 G


def check_vit_config(config: ViTConfig) -> None:
    """ValueError naming the first value out of LIMITS, or a shape the network cannot have."""
    for key, (low, high) in LIMITS.items():
        value = getattr(config, key)
        if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)):
            raise ValueError(f"{key}={value!r} is not a number")
        if not low <= value <= high:
            raise ValueError(f"{key}={value!r} is outside [{low:g}, {high:g}]")
    d, patches = config.embed_dim, (config.img_size // config.patch_size) ** 2
    if config.img_size % config.patch_size:
        raise ValueError(f"patch_size {config.patch_size} does not divide the {config.img_size}px image")
    if d % config.num_heads:
        raise ValueError(f"num_heads {config.num_heads} does not divide embed_dim {d}")
    if patches > MAX_TOKENS:
        raise ValueError(f"{patches} patches per image, more than {MAX_TOKENS}")
    # About: the blocks (qkv, projection, MLP), then the patch projection, the tokens and the head.
    block = (4 + 2 * config.mlp_ratio) * d * d
    parameters = int(config.depth * block + (3 * config.patch_size**2 + patches + 1 + config.num_classes) * d)
    if parameters > MAX_PARAMETERS:
        raise ValueError(f"about {parameters:,} parameters, more than {MAX_PARAMETERS:,}")


def vit_config_from_dict(raw: object) -> ViTConfig:
    """A checked ViTConfig from a checkpoint's dict (integers where the network needs them)."""
    if not isinstance(raw, dict):
        raise ValueError(f"vit_config is a {type(raw).__name__}, not a dict")
    if unknown := sorted(str(key) for key in set(raw) - {f.name for f in fields(ViTConfig)}):
        raise ValueError(f"vit_config has unknown keys {unknown[:5]}")
    for key in ("patch_size", "embed_dim", "depth", "num_heads", "num_classes", "img_size"):
        if key in raw and (not isinstance(raw[key], int) or isinstance(raw[key], bool)):
            raise ValueError(f"{key}={raw[key]!r} is not an integer")
    config = ViTConfig(**raw)
    check_vit_config(config)
    return config


def build_vit(config: ViTConfig) -> VisionTransformer:
    """A plain ViT: CLS token, learned position embeddings from random init, no convolution beyond the patch
    projection, the classifier reading the CLS token only."""
    check_vit_config(config)
    return VisionTransformer(**config.to_dict(), class_token=True, global_pool="token", pos_embed="learn")


def num_parameters(model: VisionTransformer) -> int:
    return sum(p.numel() for p in model.parameters())
