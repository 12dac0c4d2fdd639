"""vitbook.pretrained: the shipped digits ViT loads without unpickling and is as good as stated."""

import json
import pickle

import pytest
import torch

from vitbook import VisionTransformer, ViTConfig
from vitbook.data import load_digits_split
from vitbook.pretrained import (
    DIGITS_VIT_PATH,
    load_digits_vit,
    load_model,
    read_metadata,
    save_model,
)
from vitbook.train import evaluate


def test_shipped_file_is_small_safetensors_not_a_pickle():
    raw = DIGITS_VIT_PATH.read_bytes()
    assert DIGITS_VIT_PATH.suffix == ".safetensors" and len(raw) < 1_000_000
    header_length = int.from_bytes(raw[:8], "little")  # safetensors: u64 length, JSON header
    header = json.loads(raw[8 : 8 + header_length])
    assert "config" in header["__metadata__"]
    with pytest.raises(pickle.UnpicklingError):
        pickle.loads(raw)


def test_shipped_model_config_and_eval_mode():
    model = load_digits_vit()
    config = model.config
    assert isinstance(model, VisionTransformer) and not model.training
    assert (config.img_size, config.in_chans, config.num_classes) == ((8, 8), 1, 10)
    assert config.grid_size[0] >= 4 and config.grid_size[1] >= 4
    assert sum(p.numel() for p in model.parameters()) == config.num_parameters()
    assert all(p.device.type == "cpu" for p in model.parameters())


def test_shipped_model_reaches_its_stated_accuracy_on_the_fixed_split():
    _, _, x_test, y_test = load_digits_split()
    accuracy = evaluate(load_digits_vit(), (x_test, y_test))
    assert accuracy >= 0.98
    assert f"{accuracy:.4f}" == read_metadata()["test_accuracy"]


def test_save_and_load_round_trip(tmp_path):
    torch.manual_seed(0)
    config = ViTConfig(
        img_size=(4, 6), patch_size=2, in_chans=3, num_classes=5, embed_dim=12, depth=2,
        num_heads=3, pos_embed="learned",
    )  # fmt: skip
    model = VisionTransformer(config).eval()
    path = tmp_path / "model.safetensors"
    save_model(model, path, note="round trip")
    loaded = load_model(path)
    assert loaded.config == config and not loaded.training
    images = torch.randn(2, 3, 4, 6)
    with torch.no_grad():
        torch.testing.assert_close(loaded(images), model(images), rtol=0, atol=0)
    assert read_metadata(path)["note"] == "round trip"


def test_errors(tmp_path):
    with pytest.raises(TypeError, match="must be a vitbook VisionTransformer"):
        save_model(torch.nn.Linear(2, 2), tmp_path / "x.safetensors")
    model = VisionTransformer(ViTConfig(img_size=4, patch_size=2, embed_dim=8, depth=1,
                                        num_heads=2, num_classes=2))  # fmt: skip
    with pytest.raises(TypeError, match="metadata values must be str"):
        save_model(model, tmp_path / "x.safetensors", accuracy=0.9)
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(1)}, str(tmp_path / "bare.safetensors"))
    with pytest.raises(ValueError, match="no 'config' entry"):
        load_model(tmp_path / "bare.safetensors")
