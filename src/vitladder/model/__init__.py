from vitladder.model.vit import ViTConfig, build_vit, check_vit_config, num_parameters, vit_config_from_dict

__all__ = ["ViTConfig", "build_vit", "check_vit_config", "num_parameters", "vit_config_from_dict"]
