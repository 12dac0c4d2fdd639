"""vitbook.train: fit lowers the loss, is reproducible, evaluate counts right, errors explain."""

import math
import sys
from pathlib import Path

import matplotlib
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import vitbook
from vitbook import VisionTransformer, ViTConfig
from vitbook.plotting import plot_history
from vitbook.train import History, evaluate, fit, predict, random_shift


def toy_problem(n=48):
    """Two classes of 1x4x4 images told apart by the sign of their mean."""
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(n, 1, 4, 4, generator=generator)
    labels = (images.mean(dim=(1, 2, 3)) > 0).long()
    return images, labels


def tiny_vit():
    torch.manual_seed(0)
    config = ViTConfig(
        img_size=4, patch_size=2, in_chans=1, num_classes=2, embed_dim=16, depth=1, num_heads=2,
        drop_rate=0.1,
    )  # fmt: skip
    return VisionTransformer(config)


def test_fit_lowers_the_loss_and_records_every_epoch():
    data = toy_problem()
    model = tiny_vit()
    history = fit(model, data, epochs=15, lr=3e-3, batch_size=16, eval_data=data, progress=False)
    assert history.epochs == len(history.eval_accuracy) == len(history.seconds) == 15
    assert history.train_loss[-1] < 0.7 * history.train_loss[0]
    assert history.eval_accuracy[-1] > 0.8
    assert history.total_seconds > 0 and model.training


def test_same_seed_same_history_different_seed_different_history():
    data = toy_problem()
    runs = []
    for seed in (0, 0, 1):
        history = fit(
            tiny_vit(), data, epochs=3, batch_size=16, seed=seed, augment=random_shift(1),
            progress=False,
        )  # fmt: skip
        runs.append(history.train_loss)
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_evaluate_and_predict_on_a_hand_made_model():
    model = nn.Sequential(nn.Flatten(), nn.Linear(1, 3))
    with torch.no_grad():
        model[1].weight.copy_(torch.tensor([[-1.0], [0.0], [1.0]]))  # class 0 < 0 < class 2
        model[1].bias.zero_()
    images = torch.tensor([-3.0, -1.0, 2.0, 5.0, -2.0]).reshape(5, 1, 1, 1)
    labels = torch.tensor([0, 0, 2, 1, 2])
    assert evaluate(model, (images, labels), batch_size=2) == pytest.approx(3 / 5)
    probabilities = predict(model, images, batch_size=2)
    assert probabilities.shape == (5, 3)
    torch.testing.assert_close(probabilities.sum(dim=1), torch.ones(5))
    assert probabilities.argmax(dim=1).tolist() == [0, 0, 2, 2, 0]
    assert not model.training


def test_random_shift_moves_each_image_within_bounds():
    images = torch.zeros(6, 2, 5, 7)
    images[:, :, 2, 3] = 1.0  # one lit pixel in the middle of every image
    shifted = random_shift(1)(images, torch.Generator().manual_seed(0))
    assert shifted.shape == images.shape
    for one in shifted:
        rows, cols = torch.nonzero(one[0], as_tuple=True)
        assert len(rows) == 1 and abs(rows.item() - 2) <= 1 and abs(cols.item() - 3) <= 1
        torch.testing.assert_close(one[1], one[0])  # channels move together
    assert random_shift(0)(images, torch.Generator()).equal(images)


def test_progress_bar_goes_to_stderr_and_can_be_turned_off():
    """In a fresh process, as a script or a terminal runs fit: inside the test process, which
    bar tqdm.auto picks (text or a notebook widget) depends on what earlier tests imported."""
    import os
    import subprocess

    probe = (
        "import sys, torch; sys.path.insert(0, 'tests')\n"
        "from test_train import tiny_vit, toy_problem\n"
        "from vitbook.train import fit\n"
        "fit(tiny_vit(), toy_problem(8), epochs=2, batch_size=8, progress=True)\n"
        "print('done')\n"
    )
    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "VITBOOK_PROGRESS"}
    env |= {"PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    shown = subprocess.run([sys.executable, "-c", probe], cwd=root, env=env,
                           capture_output=True, text=True, check=True)  # fmt: skip
    assert "training" in shown.stderr and "2/2" in shown.stderr and shown.stdout == "done\n"
    quiet = subprocess.run([sys.executable, "-c", probe], cwd=root,
                           env=env | {"VITBOOK_PROGRESS": "0"}, capture_output=True, text=True,
                           check=True)  # fmt: skip
    assert "training" not in quiet.stderr and quiet.stdout == "done\n"


def test_plot_history_draws_both_panels():
    history = History([2.0, 1.0, 0.5], [0.2, 0.6, 0.9], [0.3, 0.7, 0.8], [0.1] * 3)
    fig = plot_history(history)
    assert isinstance(fig, matplotlib.figure.Figure)
    loss_ax, acc_ax = fig.axes
    assert list(loss_ax.lines[0].get_ydata()) == history.train_loss
    assert len(acc_ax.lines) == 2


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"train_data": torch.zeros(2)}, TypeError, "pair \\(images, labels\\)"),
        ({"train_data": (torch.zeros(2, 1, 4, 4, dtype=torch.uint8), torch.zeros(2).long())},
         TypeError, "floating-point.*float\\(\\)"),
        ({"train_data": (torch.zeros(2, 1, 4, 4), torch.zeros(2))}, TypeError, "int64.*long\\(\\)"),
        ({"train_data": (torch.zeros(3, 1, 4, 4), torch.zeros(2).long())}, ValueError,
         "3 images and 2 labels"),
        ({"epochs": 0}, ValueError, "epochs=0 must be a positive int"),
        ({"batch_size": 2.5}, ValueError, "batch_size=2.5"),
        ({"lr": 0.0}, ValueError, "lr=0.0 must be positive"),
        ({"label_smoothing": 1.0}, ValueError, "label_smoothing=1.0"),
        ({"eval_data": (torch.zeros(2, 1, 4, 4), [0, 1])}, TypeError, "eval_data labels"),
    ],
)  # fmt: skip
def test_fit_errors_name_the_value_and_the_fix(kwargs, error, match):
    arguments = {"train_data": toy_problem(4), "epochs": 1, "progress": False, **kwargs}
    with pytest.raises(error, match=match):
        fit(tiny_vit(), arguments.pop("train_data"), **arguments)


def test_other_errors():
    with pytest.raises(ValueError, match="max_shift=-1"):
        random_shift(-1)
    with pytest.raises(TypeError, match="images must be a floating-point tensor"):
        predict(tiny_vit(), torch.zeros(2, 1, 4, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="at least one epoch"):
        plot_history(History())


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16", "auto"])
def test_each_precision_trains_on_the_cpu(precision):
    data = toy_problem()
    # 20 epochs: over 12 seeds of the model, in every precision, under torch 2.11 and 2.13, the
    # last epoch's loss ended at 0.57 to 0.70 of the first (after 12 epochs: up to 0.91)
    history = fit(tiny_vit(), data, epochs=20, lr=3e-3, batch_size=16, precision=precision,
                  progress=False)  # fmt: skip
    assert history.precision == ("fp32" if precision == "auto" else precision)
    assert history.train_loss[-1] < 0.8 * history.train_loss[0]


def test_mixed_precision_computes_in_the_low_precision():
    seen = []
    model = tiny_vit()
    model.head.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
    fit(model, toy_problem(16), epochs=1, batch_size=16, precision="bf16", progress=False)
    fit(model, toy_problem(16), epochs=1, batch_size=16, precision="fp32", progress=False)
    assert seen == [torch.bfloat16, torch.float32]
    assert evaluate(model, toy_problem(16), precision="bf16") == pytest.approx(
        evaluate(model, toy_problem(16)), abs=0.13)  # fmt: skip


def test_only_parameters_that_require_grad_are_trained():
    model = tiny_vit()
    model.requires_grad_(False)
    model.head.requires_grad_(True)  # a linear probe
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    fit(model, toy_problem(), epochs=2, batch_size=16, progress=False)
    changed = {name for name, p in model.named_parameters() if not torch.equal(p, before[name])}
    assert changed == {"head.weight", "head.bias"}
    model.head.requires_grad_(False)
    with pytest.raises(ValueError, match="no parameter with requires_grad=True"):
        fit(model, toy_problem(), epochs=1, progress=False)


def test_sgd_with_clipping_takes_a_step_of_the_clipped_length():
    """First SGD step: momentum buffer = gradient, so the step is lr times the clipped gradient."""
    images, labels = toy_problem(16)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 2))
    with torch.no_grad():
        model[1].weight.mul_(100.0)  # a large loss, so a large gradient
    before = torch.cat([p.detach().flatten().clone() for p in model.parameters()])
    fit(model, (images * 100, labels), epochs=1, batch_size=16, lr=1.0, optimizer="sgd",
        weight_decay=0.0, warmup_epochs=0, clip_grad_norm=0.5, progress=False)  # fmt: skip
    after = torch.cat([p.detach().flatten() for p in model.parameters()])
    # One step of a one-step cosine schedule: the learning-rate factor is 1 at step 0.
    assert (after - before).norm().item() == pytest.approx(0.5, rel=1e-4)


def test_mix_gets_labels_and_its_soft_targets_train():
    calls = []

    def swap_half(images, labels, generator):
        calls.append((images.shape, labels.shape, generator.device))
        targets = F.one_hot(labels, 2).float() * 0.9 + 0.05  # (B, 2) rows sum to 1
        return images, targets

    history = fit(tiny_vit(), toy_problem(), epochs=10, lr=3e-3, batch_size=16, mix=swap_half,
                  progress=False)  # fmt: skip
    assert len(calls) == 30 and calls[0] == ((16, 1, 4, 4), (16,), torch.device("cpu"))
    assert history.train_loss[-1] < history.train_loss[0]
    with pytest.raises(TypeError, match=r"mix must be a function mix\(images, labels"):
        fit(tiny_vit(), toy_problem(), epochs=1, mix="mixup", progress=False)


def count_reads(monkeypatch) -> list[str]:
    """Record what makes a GPU wait for the host: vitbook reading a tensor's value into Python.

    Reads inside torch itself are not counted: on the CPU the optimizer reads its step counters
    (CPU tensors), while on a GPU ``fit`` uses the fused optimizers, which read nothing.
    """
    package = str(Path(vitbook.__file__).parent)
    reads = []
    for method in ("__bool__", "item", "tolist", "cpu", "numpy", "__float__", "__int__"):
        original = getattr(torch.Tensor, method)

        def counted(self, *args, _original=original, _method=method, **kwargs):
            if sys._getframe(1).f_code.co_filename.startswith(package):
                reads.append(_method)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, method, counted)
    return reads


@pytest.mark.parametrize("sync_every", [None, 4, 10**9])
def test_the_host_reads_the_device_every_sync_every_steps(monkeypatch, sync_every, accumulate=1):
    """The reads grow with the steps by one per ``sync_every`` steps (the finiteness verdict);
    everything else (input checks, the per-epoch read of the sums, evaluation) does not grow
    with steps. ``None`` on the CPU reads after every step; 10**9 stands for a GPU's default,
    a read at the epoch's end only: 12 steps read exactly as often as 4."""
    reads = count_reads(monkeypatch)
    counts = {}
    for steps in (4, 12):
        reads.clear()
        fit(tiny_vit(), toy_problem(16 * steps), epochs=1, batch_size=16,
            augment=random_shift(1), accumulate=accumulate, sync_every=sync_every,
            progress=False)  # fmt: skip
        counts[steps] = len(reads)
    every = 1 if sync_every is None else sync_every
    assert counts[12] - counts[4] == 12 // every - 4 // every, counts


def test_a_gpu_reads_at_the_epochs_end_and_a_cpu_after_every_step():
    from vitbook.train.loop import _sync_every

    assert _sync_every(None, torch.device("cpu")) == 1
    steps_in_any_epoch = 10**12
    assert _sync_every(None, torch.device("cuda")) > steps_in_any_epoch
    assert _sync_every(3, torch.device("cuda")) == 3
    with pytest.raises(ValueError, match=r"sync_every=0 must be an int >= 1"):
        fit(tiny_vit(), toy_problem(), epochs=1, sync_every=0, progress=False)
    with pytest.raises(TypeError, match=r"sync_every must be an int, got '2'"):
        fit(tiny_vit(), toy_problem(), epochs=1, sync_every="2", progress=False)


class NaNFromCall(nn.Module):
    """A small classifier with a BatchNorm (a buffer the forward pass changes) whose logits turn
    to NaN from the ``bad``-th call on."""

    def __init__(self, bad: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.BatchNorm1d(8),
                                 nn.Linear(8, 2))  # fmt: skip
        self.calls, self.bad = 0, bad

    def forward(self, images):
        self.calls += 1
        logits = self.net(images)
        return logits * float("nan") if self.calls >= self.bad else logits


@pytest.mark.parametrize("sync_every", [1, 4, 10**9])
def test_a_nan_found_late_names_its_step_and_restores_the_state_before_it(sync_every):
    """A NaN at step 8 of 18 (epoch 2 of 3, 6 steps an epoch): whenever the host reads the
    verdict (after step 8; at step 10, 4 steps after the read at the first epoch's end; at the
    second epoch's end), the error names step 8 and the model holds the state after step 7,
    bit for bit: a later read only wasted the steps in between."""
    states = []
    reference = NaNFromCall(bad=10**9)
    reference.register_forward_pre_hook(
        lambda module, args: states.append({k: v.clone() for k, v in module.state_dict().items()}))
    recipe = {"epochs": 3, "batch_size": 8, "warmup_epochs": 0, "progress": False}
    fit(reference, toy_problem(48), **recipe)
    model = NaNFromCall(bad=8)
    with pytest.raises(ValueError, match=r"the training loss is nan at epoch 2, step 8 of 18; "
                                         r"training stopped before this step"):
        fit(model, toy_problem(48), sync_every=sync_every, **recipe)
    assert model.calls == {1: 8, 4: 10, 10**9: 12}[sync_every]  # when the host read
    for name, tensor in states[7].items():  # the state step 8 began with
        assert torch.equal(model.state_dict()[name], tensor), name


@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_the_numbers_do_not_depend_on_when_the_host_reads(precision):
    """fp16 skips a step with an inf loss (and undoes its BatchNorm update) on the device too."""
    runs = []
    for sync_every in (1, 3, 10**9):
        model = NaNFromCall(bad=10**9)
        calls = []

        def augment(images, generator, calls=calls):
            calls.append(1)  # step 5: 1e6 times the pixels overflow fp16, not fp32
            return images * (1e6 if len(calls) == 5 else 1.0)

        history = fit(model, toy_problem(48), epochs=3, batch_size=12, augment=augment,
                      precision=precision, sync_every=sync_every, progress=False)  # fmt: skip
        runs.append((history, model.state_dict()))
    for history, state in runs[1:]:
        assert history.train_loss == runs[0][0].train_loss
        assert history.train_accuracy == runs[0][0].train_accuracy
        for name, tensor in runs[0][1].items():
            assert torch.equal(state[name], tensor), name


def test_precision_and_optimizer_are_checked():
    with pytest.raises(ValueError, match=r"precision='half' is not supported; choose one of"):
        fit(tiny_vit(), toy_problem(), epochs=1, precision="half", progress=False)
    with pytest.raises(ValueError, match=r"optimizer='adam' is not supported"):
        fit(tiny_vit(), toy_problem(), epochs=1, optimizer="adam", progress=False)
    with pytest.raises(ValueError, match=r"clip_grad_norm=0 must be a finite number > 0"):
        fit(tiny_vit(), toy_problem(), epochs=1, clip_grad_norm=0, progress=False)
    with pytest.raises(ValueError, match=r"precision='fp8'"):
        predict(tiny_vit(), torch.zeros(2, 1, 4, 4), precision="fp8")


def test_random_shift_is_a_crop_of_the_zero_padded_image():
    images = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 3, 4, 5)
    generator = torch.Generator().manual_seed(7)
    offsets = torch.randint(0, 5, (2, 2), generator=torch.Generator().manual_seed(7)).tolist()
    shifted = random_shift(2)(images, generator)
    padded = F.pad(images, (2, 2, 2, 2))
    for k, (dy, dx) in enumerate(offsets):
        assert torch.equal(shifted[k], padded[k, :, dy : dy + 4, dx : dx + 5])
    assert shifted.is_contiguous() and shifted.stride() == images.stride()


# --- warm-up in steps, accumulation, criterion, repeated augmentation --------------------------


def learning_rates(monkeypatch, **kwargs):
    """The learning rate of every optimizer step of a fit."""
    seen = []
    original = torch.optim.AdamW.step

    def step(self, *args, **kw):
        seen.append(self.param_groups[0]["lr"])
        return original(self, *args, **kw)

    monkeypatch.setattr(torch.optim.AdamW, "step", step)
    fit(nn.Sequential(nn.Flatten(), nn.Linear(16, 2)), toy_problem(32), lr=0.5, progress=False,
        **kwargs)  # fmt: skip
    monkeypatch.undo()
    return seen


def test_warmup_counts_optimizer_steps(monkeypatch):
    lrs = learning_rates(monkeypatch, epochs=3, batch_size=8, warmup_steps=3)  # 4 steps an epoch
    assert len(lrs) == 12
    assert lrs[:3] == pytest.approx([0.5 / 3, 1.0 / 3, 0.5])  # linear, over 3 steps
    assert lrs[3] == pytest.approx(0.5) and lrs[4] < lrs[3]  # then the cosine
    by_epoch = learning_rates(monkeypatch, epochs=3, batch_size=8)  # default: one epoch
    assert by_epoch == learning_rates(monkeypatch, epochs=3, batch_size=8, warmup_steps=4)
    assert learning_rates(monkeypatch, epochs=1, batch_size=8, warmup_steps=0)[0] == 0.5
    with pytest.raises(ValueError, match=r"warmup_epochs=1 and warmup_steps=500 both set"):
        fit(tiny_vit(), toy_problem(), epochs=1, warmup_epochs=1, warmup_steps=500,
            progress=False)  # fmt: skip
    with pytest.raises(ValueError, match=r"warmup_steps=-1 must be an int >= 0"):
        fit(tiny_vit(), toy_problem(), epochs=1, warmup_steps=-1, progress=False)


def deterministic_vit():
    torch.manual_seed(0)
    # no dropout: the same function in every pass
    config = ViTConfig(img_size=4, patch_size=2, in_chans=1, num_classes=3, embed_dim=16,
                       depth=2, num_heads=2)  # fmt: skip
    return VisionTransformer(config)


@pytest.mark.parametrize("batch_size, accumulate", [(16, 4), (10, 3), (7, 7)])
def test_accumulated_gradients_are_the_whole_batch_s(batch_size, accumulate):
    """fp32, no dropout: accumulate micro-batches (of unequal sizes, and a smaller last batch)
    and get the one-batch history and weights, up to the order of float sums.

    SGD, because AdamW divides by the gradient's root mean square: on a parameter whose true
    gradient is 0 (attention's key bias: softmax ignores it) it turns rounding noise into steps
    of size lr, so its weights differ by 1e-5 there while the histories agree to 1e-7.
    """
    images, labels = toy_problem(45)
    data = (images, labels % 3)
    for optimizer, lr in (("sgd", 0.05), ("adamw", 3e-3)):
        runs = []
        for parts in (1, accumulate):
            model = deterministic_vit()
            history = fit(model, data, epochs=3, batch_size=batch_size, lr=lr, accumulate=parts,
                          optimizer=optimizer, augment=random_shift(1), label_smoothing=0.1,
                          progress=False)  # fmt: skip
            runs.append((history, model.state_dict()))
        (one, one_state), (many, many_state) = runs
        # float32 sums in another order: a few 1e-8 in the loss over 3 epochs (measured)
        assert many.train_loss == pytest.approx(one.train_loss, rel=0, abs=1e-6), optimizer
        assert many.train_accuracy == one.train_accuracy, optimizer
        if optimizer == "sgd":  # measured: at most 1.2e-7 apart
            for name, tensor in one_state.items():
                torch.testing.assert_close(many_state[name], tensor, atol=1e-6, rtol=0, msg=name)


def test_accumulate_must_split_the_batch():
    with pytest.raises(ValueError, match=r"accumulate=0 must be an int >= 1"):
        fit(tiny_vit(), toy_problem(), epochs=1, accumulate=0, progress=False)
    with pytest.raises(ValueError, match=r"accumulate=9 micro-batches cannot split a batch of 8"):
        fit(tiny_vit(), toy_problem(), epochs=1, batch_size=8, accumulate=9, progress=False)
    with pytest.raises(TypeError, match=r"accumulate must be an int"):
        fit(tiny_vit(), toy_problem(), epochs=1, accumulate=2.0, progress=False)


class TwoHeads(nn.Module):
    """A distilled-ViT-like toy: two linear heads; both logits in training, their mean in eval."""

    def __init__(self, n_cls=2):
        super().__init__()
        self.head = nn.Linear(16, n_cls)
        self.head_dist = nn.Linear(16, n_cls)

    def forward(self, images):
        x = images.flatten(1)
        logits, dist_logits = self.head(x), self.head_dist(x)
        if self.training:
            return logits, dist_logits
        return (logits + dist_logits) / 2


def test_a_criterion_gets_the_outputs_the_targets_and_the_augmented_images():
    calls, augmented = [], []

    def shift(images, generator):
        out = random_shift(1)(images, generator)
        augmented.append(out)
        return out

    def criterion(outputs, targets, images):
        calls.append((outputs, targets, images, torch.is_autocast_enabled("cpu")))
        logits, dist_logits = outputs
        loss = F.cross_entropy(logits, targets) + F.cross_entropy(dist_logits, targets)
        return (loss / 2).to(torch.bfloat16)  # fit takes the loss in fp32 whatever it returns

    data = toy_problem()
    history = fit(TwoHeads(), data, epochs=6, lr=0.05, batch_size=16, augment=shift,
                  criterion=criterion, precision="bf16", progress=False)  # fmt: skip
    assert len(calls) == 18 and history.train_loss[-1] < history.train_loss[0]
    outputs, targets, images, autocast_on = calls[0]
    assert isinstance(outputs, tuple) and outputs[0].dtype == torch.bfloat16 and autocast_on
    assert torch.equal(images, augmented[0]) and targets.shape == (16,)  # what the model saw


def test_training_accuracy_of_two_heads_counts_their_mean():
    """head: class 0 by a margin of 1; head_dist: logits (-m, m) for the image mean m; their
    mean picks class 1 where m > 1/2, each head alone elsewhere."""
    model = TwoHeads(n_cls=2)
    with torch.no_grad():
        model.head.weight.zero_()
        model.head.bias.copy_(torch.tensor([1.0, 0.0]))
        model.head_dist.weight.copy_(torch.tensor([-1.0, 1.0])[:, None].expand(2, 16) / 16)
        model.head_dist.bias.zero_()
    images, labels = toy_problem(48)
    m = images.mean(dim=(1, 2, 3))
    accuracy = {  # what each way of reading the two heads would count
        "head": (labels == 0).float().mean().item(),
        "head_dist": ((m > 0).long() == labels).float().mean().item(),
        "mean": ((m > 0.5).long() == labels).float().mean().item(),
    }
    assert len(set(accuracy.values())) == 3
    # a zero loss: the heads stay as set
    history = fit(model, (images, labels), epochs=1, batch_size=16, lr=1e-9, weight_decay=0.0,
                  criterion=lambda outputs, targets, images: 0 * outputs[0].sum(),
                  progress=False)  # fmt: skip
    assert history.train_accuracy == [pytest.approx(accuracy["mean"])]
    # in eval mode the model returns the mean itself; a tuple would be averaged the same way
    assert evaluate(model, (images, labels)) == pytest.approx(accuracy["mean"])
    model.eval = lambda: model.train()  # a model that returns its tuple in eval mode too
    assert evaluate(model, (images, labels)) == pytest.approx(accuracy["mean"])


def test_tuple_outputs_need_a_criterion_and_a_criterion_owns_its_loss():
    with pytest.raises(ValueError, match=r"returned a tuple of 2 tensors in train mode.*criterion"):
        fit(TwoHeads(), toy_problem(), epochs=1, progress=False)
    with pytest.raises(ValueError, match=r"label_smoothing=0.1 with a criterion"):
        fit(TwoHeads(), toy_problem(), epochs=1, label_smoothing=0.1, progress=False,
            criterion=lambda outputs, targets, images: outputs[0].sum())  # fmt: skip
    with pytest.raises(TypeError, match=r"criterion must be a function"):
        fit(TwoHeads(), toy_problem(), epochs=1, criterion="deit", progress=False)


def test_repeated_augmentation_shows_fewer_images_more_often():
    from vitbook.train.loop import _order

    for n, r in ((30, 3), (31, 3), (10, 1), (7, 7)):
        order = _order(n, r, torch.Generator().manual_seed(2), torch.device("cpu"))
        assert len(order) == n
        distinct = order.unique_consecutive()
        assert len(distinct) == math.ceil(n / r) == len(set(order.tolist()))
        runs = torch.unique_consecutive(order, return_counts=True)[1]
        assert (runs[:-1] == r).all() and runs[-1] <= r  # copies next to each other
    plain = _order(12, 1, torch.Generator().manual_seed(5), torch.device("cpu"))
    assert torch.equal(plain, torch.randperm(12, generator=torch.Generator().manual_seed(5)))
    seen = []
    fit(tiny_vit(), toy_problem(48), epochs=2, batch_size=12, repeated_augmentation=3,
        augment=lambda x, g: seen.append(x.clone()) or x, progress=False)  # fmt: skip
    epoch = torch.cat(seen[:4])  # (48, 1, 4, 4): 16 images, 3 copies each
    assert len(torch.unique(epoch.flatten(1), dim=0)) == 16
    with pytest.raises(ValueError, match=r"repeated_augmentation=49 is more than the 48"):
        fit(tiny_vit(), toy_problem(48), epochs=1, repeated_augmentation=49, progress=False)


def test_a_step_with_accumulation_reads_the_host_as_often(monkeypatch):
    test_the_host_reads_the_device_every_sync_every_steps(monkeypatch, 4, accumulate=4)


def test_plotting_imports_train_and_train_does_not_import_plotting():
    import subprocess

    probe = "import sys, vitbook.train; assert 'vitbook.plotting' not in sys.modules"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    from vitbook.plotting import training

    assert training.History is History
