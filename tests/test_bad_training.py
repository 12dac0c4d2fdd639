"""Bad training data and diverging training: refused before the first step, or stopped before
the step that would spread NaN into the model, which keeps its weights."""

import pytest
import torch
from torch import nn

from vitbook import VisionTransformer, ViTConfig
from vitbook.train import evaluate, fit, predict


def tiny_vit() -> VisionTransformer:
    torch.manual_seed(0)
    return VisionTransformer(ViTConfig(img_size=4, patch_size=2, in_chans=1, embed_dim=8,
                                       depth=1, num_heads=2, num_classes=3))  # fmt: skip


def data(n: int = 8):
    generator = torch.Generator().manual_seed(1)
    return torch.rand(n, 1, 4, 4, generator=generator), torch.arange(n) % 3


def snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: t.clone() for name, t in model.state_dict().items()}


def assert_bit_identical(model: nn.Module, before: dict[str, torch.Tensor]) -> None:
    after = model.state_dict()
    assert after.keys() == before.keys()
    for name, tensor in before.items():
        assert torch.equal(after[name], tensor), name


def with_pixel(value: float):
    images, labels = data()
    images[3, 0, 1, 2] = value
    return images, labels


def with_label(value: int):
    images, labels = data()
    labels[5] = value
    return images, labels


FIT = [
    ("NaN pixel", {"train_data": with_pixel(float("nan"))}, ValueError,
     r"train_data images has 1 non-finite value\(s\) \(NaN\) among 128"),
    ("inf pixel in eval data", {"eval_data": with_pixel(float("inf"))}, ValueError,
     r"eval_data images has 1 non-finite value\(s\) \(inf\)"),
    ("label above the classes", {"train_data": with_label(7)}, ValueError,
     r"train_data labels hold \[7\], outside the class indices 0 \.\. 2"),
    ("ignore-index label -100", {"train_data": with_label(-100)}, ValueError,
     r"train_data labels hold \[-100\], outside the class indices 0 \.\. 2; .*-100"),
    ("lr as a string", {"lr": "0.1"}, TypeError, r"lr must be a number, got '0\.1' of type str"),
    ("lr infinite", {"lr": float("inf")}, ValueError, r"lr=inf must be a finite number"),
    ("weight_decay negative", {"weight_decay": -0.1}, ValueError,
     r"weight_decay=-0\.1 must be a finite number >= 0"),
    ("warmup_epochs as a float", {"warmup_epochs": 0.5}, TypeError,
     r"warmup_epochs must be an int, got 0\.5"),
    ("seed as a string", {"seed": "0"}, TypeError, r"seed must be an int, got '0'"),
    ("augment not callable", {"augment": "shift"}, TypeError,
     r"augment must be a function augment\(images, generator\) or None, got str"),
    ("progress as a string", {"progress": "no"}, TypeError,
     r"progress must be True or False, got 'no'"),
    ("unknown device", {"device": "gpu"}, ValueError,
     r"device='gpu' is not a device that torch knows"),
]  # fmt: skip


@pytest.mark.parametrize(("kwargs", "error", "pattern"), [c[1:] for c in FIT],
                         ids=[c[0] for c in FIT])  # fmt: skip
def test_fit_refuses_bad_input_before_touching_the_model(kwargs, error, pattern):
    model = tiny_vit()
    before = snapshot(model)
    arguments = {"train_data": data(), "epochs": 1, "progress": False, **kwargs}
    with pytest.raises(error, match=pattern):
        fit(model, arguments.pop("train_data"), **arguments)
    assert_bit_identical(model, before)


def test_labels_of_a_generic_module_are_checked_against_its_logits_before_any_step():
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
    before = snapshot(model)
    with pytest.raises(ValueError, match=r"labels hold \[7\], outside the class indices 0 \.\. 2"):
        fit(model, with_label(7), epochs=1, progress=False)
    assert_bit_identical(model, before)
    message = r"the model must return \(B, n_cls\) logits, got \(8, 4, 4\)"
    with pytest.raises(ValueError, match=message):
        fit(nn.Sequential(nn.Linear(4, 4), nn.Flatten(0, 1)), data(), epochs=1, progress=False)


def test_a_model_without_a_head_is_refused():
    model = VisionTransformer(ViTConfig(img_size=4, patch_size=2, in_chans=1, embed_dim=8,
                                        depth=1, num_heads=2, num_classes=0))  # fmt: skip
    with pytest.raises(ValueError, match=r"the model has num_classes=0, so no classification head"):
        fit(model, data(), epochs=1, progress=False)


class ExplodesOnCall(nn.Module):
    """A linear classifier whose logits turn to NaN from the ``bad``-th call on."""

    def __init__(self, bad: int) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 3)
        self.calls, self.bad = 0, bad

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        logits = self.linear(images.flatten(1))
        return logits * float("nan") if self.calls >= self.bad else logits


def test_a_non_finite_loss_mid_training_stops_before_that_step(monkeypatch):
    torch.manual_seed(0)
    model = ExplodesOnCall(bad=4)
    reference = ExplodesOnCall(bad=10**9)  # the same run without the NaN
    reference.load_state_dict(model.state_dict())
    after_step = []
    original_step = torch.optim.AdamW.step

    def recording_step(self, *args, **kwargs):
        out = original_step(self, *args, **kwargs)
        after_step.append(snapshot(reference))
        return out

    monkeypatch.setattr(torch.optim.AdamW, "step", recording_step)
    fit(reference, data(), epochs=3, batch_size=4, progress=False, warmup_epochs=0)
    monkeypatch.undo()
    assert len(after_step) == 6 and not torch.equal(after_step[2]["linear.weight"],
                                                    after_step[3]["linear.weight"])
    with pytest.raises(ValueError, match=r"the training loss is nan at epoch 2, step 4 of 6; "
                                         r"training stopped before this step.*Lower lr"):
        fit(model, data(), epochs=3, batch_size=4, progress=False, warmup_epochs=0)
    assert model.calls == 4
    assert_bit_identical(model, after_step[2])  # the weights after step 3, before step 4


def test_evaluate_and_predict_refuse_bad_labels_and_images():
    model = tiny_vit()
    with pytest.raises(ValueError, match=r"data labels hold \[-100\], outside the class indices"):
        evaluate(model, with_label(-100))
    linear = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
    with pytest.raises(ValueError, match=r"data labels hold \[3\], outside the class indices "
                                         r"0 \.\. 2"):  # fmt: skip
        evaluate(linear, with_label(3))
    with pytest.raises(ValueError, match=r"images has 1 non-finite value\(s\) \(NaN\)"):
        predict(linear, with_pixel(float("nan"))[0])
    with pytest.raises(ValueError, match=r"batch_size=0 must be an int >= 1"):
        predict(linear, data()[0], batch_size=0)
    with pytest.raises(TypeError, match=r"model must be a torch\.nn\.Module .*got str"):
        evaluate("model", data())
