"""Hostile and broken weight files, and Hugging Face configs and state dicts that do not convert.

Every error names the file (or the config entry) and says what to do; a header that claims a
huge model fails at once, before anything of that size is built.
"""

import json
import os
import pickle
import time
import tracemalloc

import pytest
import torch
from safetensors.torch import load_file, save_file

from vitbook import VisionTransformer, ViTConfig
from vitbook.pretrained import PretrainedViT, load_pretrained
from vitbook.pretrained.checkpoints import ExistingFileError, load_model, read_metadata, save_model
from vitbook.pretrained.convert import (
    config_from_hf,
    from_hf_state_dict,
    hf_class_names,
    to_hf_state_dict,
)

CONFIG = ViTConfig(img_size=8, patch_size=4, in_chans=1, embed_dim=8, depth=1, num_heads=2,
                   num_classes=3)  # fmt: skip
HF = {"hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32,
      "image_size": 8, "patch_size": 4, "num_channels": 1, "layer_norm_eps": 1e-6,
      "id2label": {"0": "a", "1": "b", "2": "c"}}  # fmt: skip


def model() -> VisionTransformer:
    torch.manual_seed(0)
    return VisionTransformer(CONFIG).eval()


def written(tmp_path, *, config: dict | None = None, tensors: dict | None = None, **metadata):
    """A model file whose header and tensors can be tampered with."""
    path = tmp_path / "model.safetensors"
    fields = json.loads(json.dumps(vars(CONFIG)))
    state = {name: t.contiguous() for name, t in model().state_dict().items()}
    header = {"config": json.dumps({**fields, **(config or {})}), **metadata}
    save_file({**state, **(tensors or {})}, str(path), metadata=header)
    return path


def tamper(tmp_path, change):
    """A model file with ``change(state)`` applied to its tensors."""
    path = tmp_path / "model.safetensors"
    state = {name: t.contiguous() for name, t in model().state_dict().items()}
    change(state)
    save_file(state, str(path), metadata={"config": json.dumps(vars(CONFIG))})
    return path


FILES = [
    ("truncated file", lambda p: p.write_bytes(written(p.parent).read_bytes()[:-10]),
     ValueError, r"model\.safetensors is not a readable safetensors file \(.*incomplete"),
    ("foreign file", lambda p: p.write_bytes(b"GIF89a, not a weight file at all"), ValueError,
     r"model\.safetensors is not a readable safetensors file"),
    ("empty file", lambda p: p.write_bytes(b""), ValueError,
     r"model\.safetensors is not a readable safetensors file"),
    ("config that is not JSON", lambda p: save_file(
        {"w": torch.zeros(1)}, str(p), metadata={"config": "{not json"}), ValueError,
     r"model\.safetensors does not hold a vitbook model that can be loaded: Expecting"),
    ("config that is a JSON list", lambda p: save_file(
        {"w": torch.zeros(1)}, str(p), metadata={"config": "[1, 2]"}), ValueError,
     r"does not hold a vitbook model that can be loaded: the config is a JSON list"),
    ("unknown field in the config", lambda p: written(p.parent, config={"layers": 2}),
     ValueError, r"model\.safetensors does not hold .*unknown ViTConfig field\(s\) \['layers'\]"),
    ("mistyped field in the config", lambda p: written(p.parent, config={"qkv_bias": "no"}),
     ValueError, r"model\.safetensors does not hold .*qkv_bias must be True or False"),
    ("config of another model", lambda p: written(p.parent, config={"embed_dim": 16}),
     ValueError, r"model\.safetensors does not hold .*shapes do not match the config"),
    ("extra tensor", lambda p: written(p.parent, tensors={"extra": torch.zeros(2)}), ValueError,
     r"model\.safetensors does not hold .*has 1 key\(s\) that this ViT has no place for: "
     r"\['extra'\]"),
    ("missing tensor", lambda p: tamper(p.parent, lambda s: s.pop("norm.bias")), ValueError,
     r"does not hold .*lacks 1 parameter\(s\) that the model needs: \['norm\.bias'\]"),
    ("misshapen tensor", lambda p: tamper(
        p.parent, lambda s: s.update({"head.bias": torch.zeros(4)})), ValueError,
     r"shapes do not match the config .*head\.bias: \(4,\), expected \(3,\)"),
    ("integer tensor", lambda p: tamper(
        p.parent, lambda s: s.update({"head.bias": torch.zeros(3, dtype=torch.long)})),
     ValueError, r"model\.safetensors holds tensors that are not floating point: "
     r"\['head\.bias: I64'\]"),
    ("NaN weights", lambda p: tamper(
        p.parent, lambda s: s.update({"head.bias": torch.full((3,), float("nan"))})),
     ValueError, r"model\.safetensors holds NaN or inf in \['head\.bias'\]"),
    ("no config", lambda p: save_file({"w": torch.zeros(1)}, str(p)), ValueError,
     r"model\.safetensors has no 'config' entry in its metadata"),
    ("a folder", lambda p: p.mkdir(), ValueError,
     r"model\.safetensors is a folder, not a weight file"),
]  # fmt: skip


@pytest.mark.parametrize(("make", "error", "pattern"), [c[1:] for c in FILES],
                         ids=[c[0] for c in FILES])  # fmt: skip
def test_load_model_refuses_broken_files_naming_them(tmp_path, make, error, pattern):
    path = tmp_path / "model.safetensors"
    make(path)
    with pytest.raises(error, match=pattern) as caught:
        load_model(path)
    assert str(tmp_path) in str(caught.value)


def test_library_errors_are_chained(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{broken}")
    with pytest.raises(ValueError, match=str(path)) as caught:
        read_metadata(path)
    assert type(caught.value.__cause__).__name__ == "SafetensorError"


def test_missing_file_and_bad_arguments(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nowhere\.safetensors does not exist"):
        load_model(tmp_path / "nowhere.safetensors")
    with pytest.raises(TypeError, match=r"path must be a file path \(str or pathlib\.Path\), "
                                        r"got 3"):  # fmt: skip
        load_model(3)
    with pytest.raises(ValueError, match=r"device='gpu0' is not a device that torch knows"):
        load_model(written(tmp_path), device="gpu0")


@pytest.mark.parametrize("claim", [{"depth": 10**6}, {"img_size": 10**6},
                                   {"img_size": 10**6, "pos_embed": "sincos2d"},
                                   {"embed_dim": 2**20, "num_heads": 2}])  # fmt: skip
def test_a_hostile_header_fails_fast_without_allocating(tmp_path, claim):
    path = written(tmp_path, config=claim)
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(ValueError, match=r"model\.safetensors does not hold a vitbook model"):
            load_model(path)
        seconds = time.perf_counter() - start
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Building what the header claims would take minutes and terabytes; generous bounds.
    assert seconds < 0.5, seconds
    assert peak < 10 * 2**20, peak


def test_save_model_refuses_reserved_keys_and_foreign_files(tmp_path):
    with pytest.raises(ValueError, match=r"metadata keys \['config'\] are reserved"):
        save_model(model(), tmp_path / "a.safetensors", config="{}")
    foreign = tmp_path / "notes.txt"
    foreign.write_text("my thesis")
    with pytest.raises(ExistingFileError, match=r"notes\.txt exists and is not a vitbook model "
                                                r"file; .*overwrite=True"):  # fmt: skip
        save_model(model(), foreign)
    assert foreign.read_text() == "my thesis"
    assert isinstance(ExistingFileError("x"), ValueError | FileExistsError)
    save_model(model(), foreign, overwrite=True)
    assert load_model(foreign).config == CONFIG
    with pytest.raises(ValueError, match=r"is a folder; pass a file name"):
        save_model(model(), tmp_path)
    with torch.device("meta"):
        shapes_only = VisionTransformer(CONFIG)
    with pytest.raises(ValueError, match=r"model is on the meta device"):
        save_model(shapes_only, tmp_path / "meta.safetensors")
    with pytest.raises(FileNotFoundError, match=r"the folder .*missing does not exist"):
        save_model(model(), tmp_path / "missing" / "m.safetensors")


def test_save_model_replaces_its_own_files_atomically(tmp_path, monkeypatch):
    path = tmp_path / "m.safetensors"
    umask = os.umask(0o022)
    try:
        save_model(model(), path, note="first")
    finally:
        os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o644  # as a plain write makes it, not mkstemp's 0600
    path.chmod(0o640)
    save_model(model(), path, note="second")  # a vitbook model file is replaced
    assert read_metadata(path)["note"] == "second"
    assert path.stat().st_mode & 0o777 == 0o640  # and keeps its permissions

    def failing_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        save_model(model(), path, note="third")
    assert read_metadata(path)["note"] == "second"  # the old file is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.safetensors"]  # no temp left


def hf_folder(tmp_path, *, config=None, weights=None, processor=None):
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**HF, **(config or {})}))
    save_file(weights or to_hf_state_dict(model()), str(folder / "model.safetensors"))
    if processor is not None:
        (folder / "preprocessor_config.json").write_text(json.dumps(processor))
    return folder


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_load_pretrained_refuses_broken_checkpoints(tmp_path):
    folder = hf_folder(tmp_path)
    assert load_pretrained(str(folder)).class_names == ("a", "b", "c")
    (folder / "config.json").write_text("{'single': 'quotes'}")
    with pytest.raises(ValueError, match=r"checkpoint/config\.json is not valid JSON"):
        load_pretrained(str(folder))
    (folder / "config.json").write_text(json.dumps({**HF, "num_hidden_layers": 10**6}))
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"'.*checkpoint' does not convert: .*depth=1000000"):
        load_pretrained(str(folder))
    assert time.perf_counter() - start < 0.5
    (folder / "config.json").write_text(json.dumps(HF))
    (folder / "model.safetensors").unlink()
    with open(folder / "pytorch_model.bin", "wb") as file:
        pickle.dump(Evil(), file, protocol=2)
    with pytest.raises(ValueError, match=r"pytorch_model\.bin holds Python objects other than "
                                         r"tensors.*refuses to load it") as caught:  # fmt: skip
        load_pretrained(str(folder))
    assert "weights_only=False" not in str(caught.value) and caught.value.__cause__ is None
    (folder / "pytorch_model.bin").write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(ValueError, match=r"pytorch_model\.bin is not a readable PyTorch weight"):
        load_pretrained(str(folder))


def test_preprocessor_values_are_one_positive_number_per_channel(tmp_path):
    folder = hf_folder(tmp_path, processor={"image_mean": [0.5], "image_std": [0]})
    with pytest.raises(ValueError, match=r"image_std\[0\] of '.*checkpoint'=0 must be a finite "
                                         r"number > 0"):  # fmt: skip
        load_pretrained(str(folder))
    (folder / "preprocessor_config.json").write_text(
        json.dumps({"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5]}))
    with pytest.raises(ValueError, match=r"image_mean=\[0\.5, 0\.5, 0\.5\] in the preprocessor "
                                         r"config .* must give one number per channel, and the "
                                         r"model has 1"):  # fmt: skip
        load_pretrained(str(folder))
    with pytest.raises(ValueError, match=r"mean=\(0\.5, 0\.5, 0\.5\) must be a tuple of one "
                                         r"number per channel, and the model has in_chans=1"):
        PretrainedViT(model=model(), class_names=("a", "b", "c"), mean=(0.5,) * 3, std=(1.0,),
                      source="test")  # fmt: skip
    with pytest.raises(ValueError, match=r"class_names has 2 names but the model has "
                                         r"num_classes=3 logits"):  # fmt: skip
        PretrainedViT(model=model(), class_names=("a", "b"), mean=(0.5,), std=(1.0,),
                      source="test")  # fmt: skip


def qkv_of_unequal_width():
    state = to_hf_state_dict(model())
    key = "vit.encoder.layer.0.attention.attention.key.weight"
    state[key] = state[key][:, :4].contiguous()
    return state


CONVERTERS = [
    ("id2label as a list", lambda: hf_class_names({"id2label": ["a", "b"]}), TypeError,
     r"id2label must be a dict \{index: name\} as in config\.json, got list; for a list of "
     r"names use dict\(enumerate\(names\)\)"),
    ("id2label with names as keys", lambda: hf_class_names({"id2label": {"cat": 0}}),
     ValueError, r"id2label keys must be class indices such as '0' or 0, got \['cat'\]"),
    ("hidden_size 0", lambda: config_from_hf({**HF, "hidden_size": 0}, num_classes=3),
     ValueError, r"hf_config\['hidden_size'\]=0 must be a positive integer"),
    ("num_hidden_layers as a string", lambda: config_from_hf(
        {**HF, "num_hidden_layers": "12"}, num_classes=3), TypeError,
     r"hf_config\['num_hidden_layers'\] must be an int, got '12'"),
    ("image_size as a string", lambda: config_from_hf({**HF, "image_size": "8"}, num_classes=3),
     TypeError, r"hf_config\['image_size'\] must be an int or a \(height, width\) pair"),
    ("qkv_bias as a string", lambda: config_from_hf({**HF, "qkv_bias": "false"}, num_classes=3),
     TypeError, r"hf_config gives a config vitbook cannot build: qkv_bias must be True or False"),
    ("layer_norm_eps NaN", lambda: config_from_hf(
        {**HF, "layer_norm_eps": float("nan")}, num_classes=3), ValueError,
     r"cannot build: norm_eps=nan must be a finite number"),
    ("unknown override", lambda: config_from_hf(HF, num_classes=3, heads=2), ValueError,
     r"unknown ViTConfig field\(s\) \['heads'\]"),
    ("q, k, v of unequal width", lambda: from_hf_state_dict(qkv_of_unequal_width(), HF),
     ValueError, r"query, key and value for blocks\.0\.attn\.qkv\.weight have shapes \(8, 8\), "
     r"\(8, 4\) and \(8, 8\)"),
    ("a config claiming a million layers", lambda: from_hf_state_dict(
        to_hf_state_dict(model()), {**HF, "num_hidden_layers": 10**6}), ValueError,
     r"the config needs 12,000,008 tensors \(depth=1000000\), but the weights hold 20"),
]  # fmt: skip


@pytest.mark.parametrize(("call", "error", "pattern"), [c[1:] for c in CONVERTERS],
                         ids=[c[0] for c in CONVERTERS])  # fmt: skip
def test_converters(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


def test_round_trip_still_loads(tmp_path):
    path = tmp_path / "m.safetensors"
    save_model(model(), path)
    assert set(load_file(str(path))) == set(model().state_dict())
    images = torch.rand(2, 1, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(load_model(path)(images), model()(images), rtol=0, atol=0)


@pytest.mark.parametrize("overrides", [{}, {"qkv_bias": False}, {"num_classes": 0},
                                       {"pos_embed": "sincos2d", "class_token": False,
                                        "pool": "mean"}, {"depth": 3, "pos_embed": "none"}])
def test_the_closed_form_tensor_count_is_the_real_one(overrides):
    from vitbook.pretrained._safetensors import _num_tensors

    config = ViTConfig(**{**vars(CONFIG), **overrides})
    with torch.device("meta"):
        assert _num_tensors(config) == len(VisionTransformer(config).state_dict())


def test_class_names_as_one_str_is_refused_not_read_letter_by_letter(tmp_path):
    folder = hf_folder(tmp_path)
    with pytest.raises(TypeError, match=r"class_names='abc' is one str, which would be read as "
                                        r"3 names \('a', 'b', 'c'\); pass a tuple"):  # fmt: skip
        load_pretrained(str(folder), num_classes=3, class_names="abc")
    with pytest.raises(TypeError, match=r"read as 4 names \('b', 'i', 'r', \.\.\.\)"):
        load_pretrained(str(tmp_path / "not read"), num_classes=4, class_names="bird")  # first
    named = load_pretrained(str(folder), num_classes=1, class_names=("abc",))
    assert named.class_names == ("abc",)
