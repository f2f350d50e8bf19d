from vitladder.model.vit import ViTConfig, build_vit, num_parameters

__all__ = ["ViTConfig", "build_vit", "num_parameters"]
