"""The model of DESIGN §2: a timm VisionTransformer for 32x32 images."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from timm.models.vision_transformer import VisionTransformer


@dataclass(frozen=True)
class ViTConfig:
    """Everything needed to rebuild the network from a checkpoint."""

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


def build_vit(config: ViTConfig) -> VisionTransformer:
    """A plain ViT: CLS token, learned position embeddings from random init, no convolution
    beyond the patch projection, the classifier reading the CLS token only."""
    if config.img_size % config.patch_size:
        raise ValueError(f"patch_size {config.patch_size} does not divide the {config.img_size}px image")
    return VisionTransformer(
        img_size=config.img_size,
        patch_size=config.patch_size,
        num_classes=config.num_classes,
        embed_dim=config.embed_dim,
        depth=config.depth,
        num_heads=config.num_heads,
        mlp_ratio=config.mlp_ratio,
        drop_path_rate=config.drop_path_rate,
        class_token=True,
        global_pool="token",
        pos_embed="learn",
    )


def num_parameters(model: VisionTransformer) -> int:
    return sum(p.numel() for p in model.parameters())
