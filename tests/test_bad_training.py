"""Bad training data and diverging training: refused before the first step, or stopped before
the step that would spread NaN into the model, which keeps its weights."""

import math

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


# --- a divergence stop leaves the state it had before the failing step ------------------------


def recorded_states(model: nn.Module) -> list[dict[str, torch.Tensor]]:
    """The model's state dict before each forward pass (one per step without accumulation)."""
    before = []
    model.register_forward_pre_hook(lambda module, args: before.append(snapshot(module)))
    return before


def batch_norm_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(16, 3))


@pytest.mark.parametrize(
    "name, build, kwargs, message",
    [
        # SGD's step lr * gradient overflows float32: the update itself makes the weights inf
        ("an update that overflows", lambda: nn.Sequential(nn.Flatten(), nn.Linear(16, 3)),
         {"optimizer": "sgd", "lr": 1e30, "scale": 1e10}, r"update made the weights"),
        # AdamW's decay p (1 - lr wd) with lr wd = 1e40 overflows
        ("weight decay that overflows", lambda: nn.Sequential(nn.Flatten(), nn.Linear(16, 3)),
         {"lr": 1e20, "weight_decay": 1e20}, r"update made the weights"),
        # huge weights after step 1; step 2's forward pass puts NaN into the running statistics
        ("a BatchNorm's statistics", batch_norm_net, {"lr": 1e37},
         r"loss is nan at epoch 1, step 2 of 6; "),
        ("huge inputs", batch_norm_net, {"scale": 1e30}, r"update made the weights or buffers"),
    ],
)  # fmt: skip
def test_a_stop_restores_the_state_before_the_failing_step(name, build, kwargs, message):
    model = build()
    scale = kwargs.pop("scale", 1.0)
    images, labels = data()
    before = recorded_states(model)
    with pytest.raises(ValueError, match=message + r".*training stopped before this step"):
        fit(model, (images * scale, labels), epochs=3, batch_size=4, warmup_epochs=0,
            progress=False, **kwargs)  # fmt: skip
    state = model.state_dict()
    assert all(torch.isfinite(t).all() for t in state.values() if t.is_floating_point()), name
    assert_bit_identical(model, before[-1])  # the state before the failing step


def test_a_gradient_norm_that_overflows_is_named_as_such():
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
    before = snapshot(model)
    images, labels = data()
    with pytest.raises(ValueError, match=r"gradients' norm overflows"):
        fit(model, (images * 1e25, labels), epochs=1, batch_size=8, progress=False)
    assert_bit_identical(model, before)


def test_weights_that_are_not_finite_before_training_are_refused():
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
    with torch.no_grad():
        model[1].bias[1] = float("nan")
    with pytest.raises(ValueError, match=r"the model's 1.bias hold NaN or inf .*before training"):
        fit(model, data(), epochs=1, progress=False)


# --- fp16: a non-finite loss is the scaler's to skip -------------------------------------------


def test_fp16_skips_a_step_with_a_non_finite_loss_where_fp32_stops(monkeypatch):
    torch.manual_seed(0)
    model = ExplodesOnce(bad=3)
    start = snapshot(model)
    updates = []
    original = torch.optim.AdamW.step
    monkeypatch.setattr(torch.optim.AdamW, "step",
                        lambda self, *a, **k: updates.append(1) or original(self, *a, **k))
    history = fit(model, data(), epochs=2, batch_size=4, warmup_epochs=0, precision="fp16",
                  progress=False)  # fmt: skip
    assert model.calls == 4 and len(updates) == 3  # the scaler skipped the third update
    assert all(math.isfinite(v) for v in history.train_loss + history.train_accuracy)
    model.load_state_dict(start)
    model.calls = 0
    with pytest.raises(ValueError, match=r"the training loss is nan at epoch 2, step 3 of 4"):
        fit(model, data(), epochs=2, batch_size=4, warmup_epochs=0, precision="fp32",
            progress=False)  # fmt: skip


def test_fp16_skips_a_forward_pass_that_broke_a_batchnorm_and_undoes_it(monkeypatch):
    """Huge weights after step 1; every later forward pass gives a NaN loss and NaN running
    statistics: fp16 skips those steps (fewer than 10 in a row) and puts the statistics back."""
    model = batch_norm_net()
    after_update = []
    original = torch.optim.SGD.step

    def step(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        after_update.append(snapshot(model))
        return out

    monkeypatch.setattr(torch.optim.SGD, "step", step)
    history = fit(model, data(), epochs=3, batch_size=4, warmup_epochs=0, lr=1e37,
                  optimizer="sgd", precision="fp16", progress=False)  # fmt: skip
    assert len(after_update) == 1  # the scaler skipped the updates of steps 2 to 6
    assert_bit_identical(model, after_update[0])  # and the copy undid their forward passes
    assert math.isnan(history.train_loss[1])  # an epoch of skipped steps has no loss to show


def test_fp16_gives_up_after_ten_non_finite_losses_in_a_row():
    model = ExplodesOnCall(bad=2)
    with pytest.raises(ValueError, match=r"fp16 training loss was not finite in 10 steps in a "
                                         r"row.*precision='bf16' or 'fp32'"):  # fmt: skip
        fit(model, data(), epochs=12, batch_size=8, precision="fp16", progress=False)
    assert model.calls == 11


class ExplodesOnce(nn.Module):
    """A linear classifier whose logits are inf at the ``bad``-th call only."""

    def __init__(self, bad: int) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 3)
        self.calls, self.bad = 0, bad

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        logits = self.linear(images.flatten(1))
        return logits * float("inf") if self.calls == self.bad else logits


# --- what enters fit: eval labels, augmentations, mixes -----------------------------------------


def test_eval_labels_of_a_sequential_are_checked_at_the_first_evaluation():
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
    with pytest.raises(ValueError, match=r"eval_data labels hold \[5\], outside the class "
                                         r"indices 0 \.\. 2"):  # fmt: skip
        fit(model, data(), epochs=1, eval_data=with_label(5), progress=False)


def test_rand_augment_refuses_images_outside_zero_one_once():
    from vitbook.data.augment import compose, rand_augment, random_crop_flip

    images, labels = data()
    message = r"train_data images range from -0\.97\d+ to 0\.99\d+, but .* in \[0, 1\]"
    with pytest.raises(ValueError, match=message):
        fit(tiny_vit(), (images * 2 - 1, labels), epochs=1, progress=False,
            augment=compose(random_crop_flip(1), rand_augment()))  # fmt: skip
    # a crop needs no range
    fit(tiny_vit(), (images * 2 - 1, labels), epochs=1, augment=random_crop_flip(1),
        progress=False)  # fmt: skip


def test_a_mix_s_class_count_is_checked_against_the_labels_and_the_model():
    from vitbook.data.augment import mixup_cutmix

    with pytest.raises(ValueError, match=r"train_data labels hold \[7\], outside the class "
                                         r"indices 0 \.\. 4"):  # fmt: skip
        fit(nn.Sequential(nn.Flatten(), nn.Linear(16, 8)), with_label(7), epochs=1,
            mix=mixup_cutmix(5), progress=False)  # fmt: skip
    with pytest.raises(ValueError, match=r"the mix makes targets for n_cls=5 classes but the "
                                         r"model has num_classes=3"):  # fmt: skip
        fit(tiny_vit(), data(), epochs=1, mix=mixup_cutmix(5), progress=False)
    with pytest.raises(ValueError, match=r"soft targets for 5 classes but the model has 3"):
        fit(nn.Sequential(nn.Flatten(), nn.Linear(16, 3)), data(), epochs=1, progress=False,
            mix=lambda x, y, g: (x, torch.full((len(y), 5), 0.2)))  # fmt: skip


@pytest.mark.parametrize(
    "augment, mix, error, match",
    [
        (lambda x, g: x[:, :, :2], None, ValueError,
         r"augment returned images of shape \(8, 1, 2, 4\).*must keep the shape"),
        (lambda x, g: x.double(), None, ValueError, r"augment returned .*torch.float64"),
        (lambda x, g: (x * 255).long(), None, TypeError,
         r"augment must return the images as a floating-point tensor, got torch.int64"),
        (None, lambda x, y, g: x, TypeError, r"mix must return a pair \(images, targets\)"),
        (None, lambda x, y, g: (x, y.float()), TypeError,
         r"mix must return targets as \(B,\) int64 labels or \(B, n_cls\) float soft targets"),
        (None, lambda x, y, g: (x, y[:4]), ValueError, r"mix returned 4 targets .* for 8 images"),
    ],
)  # fmt: skip
def test_an_augment_s_or_mix_s_first_output_is_checked(augment, mix, error, match):
    model = tiny_vit()
    before = snapshot(model)
    with pytest.raises(error, match=match):
        fit(model, data(), epochs=1, batch_size=8, augment=augment, mix=mix, progress=False)
    assert_bit_identical(model, before)


def test_empty_training_or_evaluation_data_are_refused():
    empty = (torch.zeros(0, 1, 4, 4), torch.zeros(0, dtype=torch.long))
    with pytest.raises(ValueError, match=r"train_data has 0 images and 0 labels; .* at least one"):
        fit(tiny_vit(), empty, epochs=1, progress=False)
    with pytest.raises(ValueError, match=r"eval_data has 0 images and 0 labels; .* at least one"):
        fit(tiny_vit(), data(), epochs=1, eval_data=empty, progress=False)


@pytest.mark.parametrize("targets, said", [
    (lambda y: torch.ones(len(y), 3) * 5 / 3, r"row 0 sums to 5 \(8 of 8 rows are not "),
    (lambda y: torch.tensor([[1.5, -0.5, 0.0]] * len(y)), r"row 0 sums to 1 \(8 of 8 rows"),
    (lambda y: torch.eye(3)[y].index_fill(1, torch.tensor([2]), float("nan")), r"row 0 sums to"),
])  # fmt: skip
def test_soft_targets_that_are_not_distributions_are_refused_at_the_first_step(targets, said):
    model = tiny_vit()
    before = snapshot(model)
    with pytest.raises(ValueError, match=said + r".*normalise \(targets / targets\.sum\(1, "):
        fit(model, data(), epochs=1, progress=False, mix=lambda x, y, g: (x, targets(y)))
    assert_bit_identical(model, before)
    smoothed = lambda x, y, g: (x, torch.eye(3)[y] * 0.9 + 0.1 / 3)  # noqa: E731
    fit(tiny_vit(), data(), epochs=1, progress=False, mix=smoothed)  # a distribution: trains
