"""vitbook.pretrained: the shipped digits ViT; Hugging Face checkpoints from a folder or cache."""

import json
import pickle
import sys

import pytest
import torch
from hubtools import VIT_PREPROCESSOR, add_snapshot, perturb_

from vitbook import VisionTransformer, ViTConfig
from vitbook.data import load_digits_split
from vitbook.pretrained import (
    DIGITS_VIT_CLS_PATH,
    DIGITS_VIT_PATH,
    PretrainedUnavailableError,
    PretrainedViT,
    load_digits_pretrained,
    load_digits_vit,
    load_model,
    load_pretrained,
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
    _, _, x_val, y_val, x_test, y_test = load_digits_split(validation=True)
    model, metadata = load_digits_vit(), read_metadata()
    # accepted on the validation digits, the test digits read once for the reported number
    validation = evaluate(model, (x_val, y_val))
    assert validation >= 0.98
    assert f"{validation:.4f}" == metadata["validation_accuracy"]
    accuracy = evaluate(model, (x_test, y_test))
    assert accuracy >= 0.98
    assert f"{accuracy:.4f}" == metadata["test_accuracy"]
    assert "'train_images': 1077" in metadata["recipe"]  # trained without the validation part


def test_shipped_class_token_model_reads_its_class_token_and_reaches_its_accuracy():
    raw = DIGITS_VIT_CLS_PATH.read_bytes()
    assert DIGITS_VIT_CLS_PATH.suffix == ".safetensors" and len(raw) < 1_000_000
    with pytest.raises(pickle.UnpicklingError):
        pickle.loads(raw)
    model = load_digits_vit(variant="cls")
    config = model.config
    assert isinstance(model, VisionTransformer) and not model.training
    assert (config.class_token, config.pool, config.grid_size) == (True, "cls", (4, 4))
    # The head sees the class token's final state only: changing the patch tokens' final states
    # after the last block cannot change the logits.
    images = load_digits_split()[2][:4]
    with torch.no_grad():
        features = model.forward_features(images)  # (B, N, D)
        changed = features.clone()
        changed[:, 1:] = 0.0
        torch.testing.assert_close(model.forward_head(changed), model(images), rtol=0, atol=0)
    _, _, x_val, y_val, x_test, y_test = load_digits_split(validation=True)
    metadata = read_metadata(DIGITS_VIT_CLS_PATH)
    validation = evaluate(model, (x_val, y_val))
    assert validation >= 0.97
    assert f"{validation:.4f}" == metadata["validation_accuracy"]
    accuracy = evaluate(model, (x_test, y_test))
    assert accuracy >= 0.97
    assert f"{accuracy:.4f}" == metadata["test_accuracy"]
    assert "'train_images': 1077" in metadata["recipe"]
    # The model the chapters study is unchanged: mean pooling, with a class token.
    assert (load_digits_vit().config.pool, load_digits_vit(variant="mean").config.pool) == (
        "mean",
        "mean",
    )
    with pytest.raises(ValueError, match="variant='token' is not a shipped digits model"):
        load_digits_vit(variant="token")


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


# --- Hugging Face checkpoints, without a network ---------------------------------------------


def tiny_hf_checkpoint(folder, *, labels=("cat", "dog", "fish")):
    """A random Hugging Face ViT written by save_pretrained: config.json and model.safetensors."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        image_size=32, patch_size=8, id2label=dict(enumerate(labels)),
    )  # fmt: skip
    model = transformers.ViTForImageClassification(config).eval()
    perturb_(model, 0.1)
    model.save_pretrained(folder)
    return model


def test_load_pretrained_from_the_hub_cache_gives_the_original_predictions(tmp_path):
    hf_model = tiny_hf_checkpoint(tmp_path / "saved")
    cache = tmp_path / "cache"
    preprocessor = {**VIT_PREPROCESSOR, "image_mean": [0.4, 0.5, 0.6]}
    preprocessor["image_std"] = [0.2, 0.25, 0.3]
    add_snapshot(cache, "someone/tiny-vit", tmp_path / "saved", preprocessor=preprocessor)
    bundle = load_pretrained("someone/tiny-vit", cache_dir=cache, local_files_only=True)
    assert isinstance(bundle, PretrainedViT) and isinstance(bundle.model, VisionTransformer)
    assert bundle.class_names == ("cat", "dog", "fish") and bundle.source == "someone/tiny-vit"
    assert (bundle.mean, bundle.std) == ((0.4, 0.5, 0.6), (0.2, 0.25, 0.3))
    assert bundle.model.config.norm_eps == 1e-12 and not bundle.model.training
    pictures = torch.rand(2, 3, 32, 32)
    inputs = bundle.preprocess(pictures)
    mean, std = torch.tensor([0.4, 0.5, 0.6]), torch.tensor([0.2, 0.25, 0.3])
    torch.testing.assert_close(inputs, (pictures - mean[:, None, None]) / std[:, None, None])
    with torch.no_grad():
        expected = hf_model(pixel_values=inputs).logits
        torch.testing.assert_close(bundle.model(inputs), expected, rtol=1e-5, atol=1e-5)


def test_load_pretrained_from_a_folder_and_from_a_pickled_checkpoint(tmp_path):
    hf_model = tiny_hf_checkpoint(tmp_path)
    from_safetensors = load_pretrained(str(tmp_path))
    assert (from_safetensors.mean, from_safetensors.std) == ((0.5,) * 3, (0.5,) * 3)  # defaults
    (tmp_path / "model.safetensors").unlink()
    torch.save(hf_model.state_dict(), tmp_path / "pytorch_model.bin")  # transformers 5 names
    from_pickle = load_pretrained(str(tmp_path), attn_impl="sdpa")
    assert from_pickle.model.config.attn_impl == "sdpa"
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(
            from_pickle.model(images), from_safetensors.model(images), rtol=1e-5, atol=1e-5
        )  # the fused path against the explicit one


def test_offline_without_a_cached_copy_says_what_to_do(tmp_path):
    with pytest.raises(PretrainedUnavailableError) as caught:
        load_pretrained(cache_dir=tmp_path, local_files_only=True)
    message = str(caught.value)
    assert "'google/vit-base-patch16-224'" in message and "HF_HUB_OFFLINE" in message
    assert "load_digits_pretrained()" in message and "local folder" in message
    assert isinstance(caught.value, OSError)


def test_missing_huggingface_hub_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails as if not installed
    with pytest.raises(PretrainedUnavailableError, match=r'pip install "vitbook\[pretrained\]"'):
        load_pretrained(cache_dir=tmp_path, local_files_only=True)


def test_load_pretrained_errors(tmp_path):
    with pytest.raises(TypeError, match="name must be a Hub repository"):
        load_pretrained(None)
    with pytest.raises(ValueError, match="is not a model repository .* nor a local folder"):
        load_pretrained("no such/folder/here", cache_dir=tmp_path, local_files_only=True)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="has no config.json"):
        load_pretrained(str(tmp_path / "empty"))
    tiny_hf_checkpoint(tmp_path / "weightless")
    (tmp_path / "weightless" / "model.safetensors").unlink()
    with pytest.raises(ValueError, match=r"none of the weight files \['model.safetensors'"):
        load_pretrained(str(tmp_path / "weightless"))


def test_digits_bundle_and_preprocess_checks():
    bundle = load_digits_pretrained()
    assert bundle.class_names == tuple("0123456789") and bundle.model.config.in_chans == 1
    _, _, x_test, y_test = load_digits_split()
    with torch.no_grad():
        predicted = bundle.model(bundle.preprocess(x_test)).argmax(-1)
    assert (predicted == y_test).float().mean() >= 0.98  # preprocessing leaves digits unchanged
    assert bundle.preprocess(x_test[0]).shape == (1, 1, 8, 8)
    with pytest.raises(TypeError, match="float tensor with values in"):
        bundle.preprocess(torch.zeros(1, 1, 8, 8, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"\(B, 1, H, W\) or \(1, H, W\).*\(2, 3, 8, 8\)"):
        bundle.preprocess(torch.zeros(2, 3, 8, 8))
