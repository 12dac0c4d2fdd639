"""vitbook.train.resume and fit(resume=..., after_epoch=...): a run stopped after k epochs and
resumed, in this process or another, is bit for bit the run that never stopped; a state that does
not belong to the call is refused, and a damaged state file is named."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from vitbook import VisionTransformer, ViTConfig
from vitbook.data.augment import mixup_cutmix
from vitbook.train import fit, random_shift
from vitbook.train.resume import TrainingStateError, load_state, save_state

ROOT = Path(__file__).resolve().parents[1]


def problem(n=45, n_cls=3):
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(n, 1, 4, 4, generator=generator)
    return images, (images.mean(dim=(1, 2, 3)) > 0).long() + (images[:, 0, 0, 0] > 1).long()


def vit(seed=0):
    """Dropout and stochastic depth: torch's global generator is drawn from in every step."""
    torch.manual_seed(seed)
    return VisionTransformer(ViTConfig(img_size=4, patch_size=2, in_chans=1, num_classes=3,
                                       embed_dim=16, depth=2, num_heads=2, drop_rate=0.1,
                                       drop_path_rate=0.2))  # fmt: skip


def batch_norm_net(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.Dropout(0.2), nn.Flatten(),
                         nn.Linear(16, 3))  # fmt: skip


RECIPES = {
    # warm-up across the stop, a mix (its own draws), accumulation, a smaller last batch
    "vit, adamw, mix": (vit, {"epochs": 5, "batch_size": 10, "lr": 3e-3, "warmup_epochs": 2,
                              "augment": random_shift(1), "mix": mixup_cutmix(3),
                              "accumulate": 2, "weight_decay_rule": "timm"}),
    # momentum, clipping, running statistics, repeated augmentation, bf16 autocast
    "batch norm, sgd, bf16": (batch_norm_net, {
        "epochs": 4, "batch_size": 8, "lr": 0.05, "optimizer": "sgd", "clip_grad_norm": 0.5,
        "repeated_augmentation": 3, "precision": "bf16", "label_smoothing": 0.1}),
    # the gradient scaler's scale and growth tracker
    "vit, fp16": (vit, {"epochs": 3, "batch_size": 16, "precision": "fp16"}),
}  # fmt: skip


def assert_same_run(model, history, reference, reference_history):
    assert history.train_loss == reference_history.train_loss
    assert history.train_accuracy == reference_history.train_accuracy
    assert history.eval_accuracy == reference_history.eval_accuracy
    assert history.epochs == reference_history.epochs and len(history.seconds) == history.epochs
    for name, tensor in reference.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name


@pytest.mark.parametrize("name", list(RECIPES))
def test_a_run_stopped_and_resumed_from_its_file_is_the_run_that_never_stopped(name, tmp_path):
    build, recipe = RECIPES[name]
    data = problem()
    common = {"eval_data": problem(18), "progress": False, "seed": 3, **recipe}
    reference = build()
    uninterrupted = fit(reference, data, **common)
    for stop in (1, recipe["epochs"] - 1):
        path = tmp_path / f"{stop}.pt"

        def after_epoch(done, state, stop=stop, path=path):
            if done == stop:
                save_state(path, state())
                return True
            return False

        first = fit(build(), data, after_epoch=after_epoch, **common)
        assert first.epochs == stop
        resumed_model = build(seed=7)  # other weights: the state's replace them
        resumed = fit(resumed_model, data, resume=load_state(path), **common)
        assert_same_run(resumed_model, resumed, reference, uninterrupted)
        assert resumed.train_loss[:stop] == first.train_loss


def test_the_state_is_a_copy_and_the_last_epoch_ends_the_run():
    data = problem()
    states = {}
    model = vit()
    history = fit(model, data, epochs=3, batch_size=16, progress=False,
                  after_epoch=lambda done, state: states.update({done: state()}))  # fmt: skip
    assert sorted(states) == [1, 2, 3] and history.epochs == 3
    # captured after epoch 1, unchanged by the two epochs that followed
    assert not torch.equal(states[1]["model"]["head.weight"], model.state_dict()["head.weight"])
    assert torch.equal(states[3]["model"]["head.weight"], model.state_dict()["head.weight"])
    assert states[2]["epoch"] == 2 and states[2]["step"]["steps"] == 6
    assert states[2]["history"]["train_loss"] == history.train_loss[:2]
    again = vit(seed=1)
    done = fit(again, data, epochs=3, batch_size=16, progress=False, resume=states[3])
    assert done.train_loss == history.train_loss  # nothing left to train
    assert torch.equal(again.state_dict()["head.weight"], model.state_dict()["head.weight"])


WORKER = """
import sys
import torch
from tests.test_resume import vit, problem
from vitbook.train.resume import save_state
from vitbook.train import fit, random_shift

def after_epoch(done, state):
    if done == 2:
        save_state(sys.argv[1], state())
        return True

torch.set_num_threads(1)
fit(vit(), problem(), epochs=4, batch_size=10, augment=random_shift(1), progress=False,
    after_epoch=after_epoch)
"""


def test_a_run_saved_by_another_process_goes_on_here(tmp_path):
    path = tmp_path / "state.pt"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-c", WORKER, str(path)], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=240, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the threads the other process summed with
    try:
        recipe = {"epochs": 4, "batch_size": 10, "augment": random_shift(1), "progress": False}
        reference = vit()
        uninterrupted = fit(reference, problem(), **recipe)
        model = vit(seed=5)
        resumed = fit(model, problem(), resume=load_state(path), **recipe)
    finally:
        torch.set_num_threads(threads)
    assert_same_run(model, resumed, reference, uninterrupted)


def test_a_state_that_does_not_belong_to_the_call_is_refused(tmp_path):
    data = problem()
    saved = {}
    fit(vit(), data, epochs=3, batch_size=16, lr=1e-3, progress=False,
        after_epoch=lambda done, state: saved.setdefault("state", state()) and True)  # fmt: skip
    state = saved["state"]
    with pytest.raises(TrainingStateError, match=r"other arguments \(lr=0\.001 then, 0\.002 now\)"):
        fit(vit(), data, epochs=3, batch_size=16, lr=2e-3, resume=state, progress=False)
    with pytest.raises(TrainingStateError, match=r"epochs=3 then, 4 now.*or start the run again"):
        fit(vit(), data, epochs=4, batch_size=16, resume=state, progress=False)
    with pytest.raises(TrainingStateError, match=r"images=45 then, 30 now"):
        fit(vit(), problem(30), epochs=3, batch_size=16, resume=state, progress=False)
    with pytest.raises(TrainingStateError, match=r"augment=None then, 'random_shift.<locals>"):
        fit(vit(), data, epochs=3, batch_size=16, augment=random_shift(1), resume=state,
            progress=False)  # fmt: skip
    other = VisionTransformer(ViTConfig(img_size=4, patch_size=2, in_chans=1, num_classes=3,
                                        embed_dim=8, depth=2, num_heads=2))  # fmt: skip
    with pytest.raises(TrainingStateError, match=r"weights of another model"):
        fit(other, data, epochs=3, batch_size=16, resume=state, progress=False)
    with pytest.raises(TypeError, match=r"resume must be a training state .* got str"):
        fit(vit(), data, epochs=3, batch_size=16, resume="state.pt", progress=False)
    with pytest.raises(TrainingStateError, match=r"layout 0, this vitbook reads layout 1"):
        fit(vit(), data, epochs=3, batch_size=16, resume={**state, "format": 0}, progress=False)
    with pytest.raises(TypeError, match=r"after_epoch must be a function .* got int"):
        fit(vit(), data, epochs=1, after_epoch=3, progress=False)


def test_a_damaged_state_file_is_named_with_what_to_do(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"missing\.pt does not exist"):
        load_state(tmp_path / "missing.pt")
    path = tmp_path / "cut.pt"
    fit(vit(), problem(), epochs=1, batch_size=16, progress=False,
        after_epoch=lambda done, state: save_state(path, state()))  # fmt: skip
    whole = path.read_bytes()
    assert load_state(path)["epoch"] == 1
    path.write_bytes(whole[: len(whole) // 2])  # a copy cut short
    with pytest.raises(TrainingStateError, match=r"cut\.pt is not a readable training state.*"
                                                 r"delete .*cut\.pt to train that run again"):
        load_state(path)
    path.write_bytes(b"not a zip at all")
    with pytest.raises(TrainingStateError, match=r"cut\.pt is not a readable training state"):
        load_state(path)
    plain = tmp_path / "plain.pt"
    torch.save({"weights": torch.zeros(2)}, plain)
    with pytest.raises(TrainingStateError, match=r"plain\.pt is not a training state of layout"):
        load_state(plain)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.pt", "plain.pt"]  # no temporary


def test_a_state_of_other_data_another_strength_or_past_its_epochs_is_refused():
    data = problem()
    saved = {}
    recipe = {"epochs": 3, "batch_size": 16, "augment": random_shift(1), "mix": mixup_cutmix(3),
              "progress": False}  # fmt: skip
    fit(vit(), data, **recipe,
        after_epoch=lambda done, state: saved.setdefault("state", state()) and True)  # fmt: skip
    state = saved["state"]
    images, labels = data
    for other in ((images * 0.5, labels), (images, (labels + 1) % 3), (images.flip(0), labels)):
        with pytest.raises(TrainingStateError, match=r"other arguments \(train_data_sha256="
                                                     r"'[0-9a-f]{16}' then, '[0-9a-f]{16}' now\)"):
            fit(vit(), other, resume=state, **recipe)
    with pytest.raises(TrainingStateError, match=r"eval_data_sha256=None then, '[0-9a-f]{16}' now"):
        fit(vit(), data, resume=state, eval_data=problem(18), **recipe)
    with pytest.raises(TrainingStateError, match=r"augment='random_shift\.<locals>\.augment\("
                                                 r"max_shift=1\)' then, '.*max_shift=2\)' now"):
        fit(vit(), data, resume=state, **{**recipe, "augment": random_shift(2)})
    with pytest.raises(TrainingStateError, match=r"mix='mixup_cutmix\.<locals>\.mix\(.*"
                                                 r"mixup_alpha=0\.8.*then, .*mixup_alpha=0\.4"):
        fit(vit(), data, resume=state, **{**recipe, "mix": mixup_cutmix(3, mixup_alpha=0.4)})
    for epoch in (4, -1, "2"):
        with pytest.raises(TrainingStateError, match=rf"says {re.escape(repr(epoch))} epochs are "
                           r"done, but this fit trains 3.*start the run again"):  # fmt: skip
            fit(vit(), data, resume={**state, "epoch": epoch}, **recipe)
    again = fit(vit(seed=4), data, resume=state, **{**recipe, "augment": random_shift(1),
                                                   "mix": mixup_cutmix(3)})  # fmt: skip
    assert again.epochs == 3  # the same data and the same strengths, built again: taken up


def test_a_changed_byte_or_a_folder_in_place_of_the_state_is_named(tmp_path):
    path, states = tmp_path / "run.pt", {}

    def keep(done, state):
        states[done] = state()
        save_state(path, states[done])

    fit(vit(), problem(), epochs=1, batch_size=16, progress=False, after_epoch=keep)
    whole = path.read_bytes()
    step = max(1, len(whole) // 40)
    for at in [*range(0, len(whole), step), len(whole) - 1]:
        flipped = bytearray(whole)
        flipped[at] ^= 0x01  # one bit, anywhere: header, pickle or weights
        path.write_bytes(bytes(flipped))
        with pytest.raises(TrainingStateError, match=r"run\.pt is not a readable training state"
                                                     r".*delete .*run\.pt to train that run again"):
            load_state(path)
    path.write_bytes(whole)
    assert load_state(path)["epoch"] == 1
    path.unlink()
    path.mkdir()
    with pytest.raises(TrainingStateError, match=r"run\.pt is a folder, not a training state; "
                                                 r"move it away"):  # fmt: skip
        load_state(path)
    plain = tmp_path / "plain.pt"
    torch.save(states[1], plain)  # a state without save_state's checksum
    with pytest.raises(TrainingStateError, match=r"plain\.pt holds a training state without a "
                                                 r"checksum"):  # fmt: skip
        load_state(plain)


# --- what a resumed call must repeat, and what a state may hold ---------------------------------


def stopped_after(epochs_done, *, epochs=3, **arguments):
    """A state of a run of ``problem()`` stopped after ``epochs_done`` epochs."""
    saved = {}

    def after_epoch(done, state):
        if done == epochs_done:
            saved["state"] = state()
            return True
        return False

    fit(arguments.pop("model", None) or vit(), problem(), epochs=epochs, batch_size=16,
        progress=False, after_epoch=after_epoch, **arguments)  # fmt: skip
    return saved["state"]


def linear(seed=0, hidden=None):
    torch.manual_seed(seed)
    if hidden is None:
        return nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
    return nn.Sequential(nn.Flatten(), nn.Linear(16, hidden), nn.ReLU(), nn.Linear(hidden, 3))


def test_a_distillation_resumed_with_another_teacher_is_refused():
    import copy

    from vitbook.train.distill import DistillationLoss

    def loss(teacher):
        return DistillationLoss(teacher, "soft", single_head=True)

    teacher = linear(seed=1)
    state = stopped_after(1, model=linear(), criterion=loss(copy.deepcopy(teacher)))
    for other in (linear(seed=2), linear(seed=1, hidden=8)):  # other weights, another network
        refused = r"criterion=.DistillationLoss\(.*weights=\w+\). then"
        with pytest.raises(TrainingStateError, match=refused):
            fit(linear(), problem(), epochs=3, batch_size=16, criterion=loss(other),
                resume=state, progress=False)  # fmt: skip
    resumed = fit(linear(), problem(), epochs=3, batch_size=16, progress=False,
                  criterion=loss(copy.deepcopy(teacher)), resume=state)  # the same teacher
    assert resumed.epochs == 3


class Jitter:
    """An augmentation whose strength is a private attribute."""

    def __init__(self, strength):
        self._strength = strength

    def __call__(self, images, generator):
        noise = torch.randn(images.shape, generator=generator, device=images.device)
        return images + self._strength * noise


def add(amount, images, generator):
    return images + amount


def by(amount):
    def augment(images, generator):
        return images + amount

    return augment


def deep(amount):
    nested = [[[[[amount]]]]]  # five lists deep

    def augment(images, generator):
        return images + nested[0][0][0][0][0]

    return augment


@pytest.mark.parametrize(
    "setting",
    [lambda s: by(torch.tensor(s)), lambda s: functools.partial(add, torch.tensor(s)), Jitter,
     deep],
    ids=["a tensor", "a partial of a tensor", "a private attribute", "five lists deep"],
)
def test_an_augmentations_setting_is_compared_however_it_is_held(setting):
    state = stopped_after(1, augment=setting(0.1))
    with pytest.raises(TrainingStateError, match=r"other arguments \(augment="):
        fit(vit(), problem(), epochs=3, batch_size=16, augment=setting(0.2), resume=state,
            progress=False)  # fmt: skip
    resumed = fit(vit(), problem(), epochs=3, batch_size=16, augment=setting(0.1), resume=state,
                  progress=False)  # fmt: skip
    assert resumed.epochs == 3


def test_a_setting_that_cannot_be_compared_is_refused_with_what_to_do():
    class Opaque:
        __slots__ = ()

        def __call__(self, images, generator):
            return images

    opaque = torch.Generator()  # no settings to read: its state is not the augmentation's
    with pytest.raises(TypeError, match=r"augment holds a torch.Generator, which fit cannot "
                                        r"compare.*resume"):  # fmt: skip
        fit(vit(), problem(), epochs=1, augment=functools.partial(add, opaque), progress=False,
            after_epoch=lambda done, state: None)  # fmt: skip
    fit(vit(), problem(), epochs=1, augment=Opaque(), progress=False,  # no settings at all
        after_epoch=lambda done, state: None)  # fmt: skip


def test_one_state_resumed_twice_gives_the_same_run_twice():
    state = stopped_after(1)
    first_model, second_model = vit(seed=3), vit(seed=4)
    first = fit(first_model, problem(), epochs=3, batch_size=16, resume=state, progress=False)
    second = fit(second_model, problem(), epochs=3, batch_size=16, resume=state, progress=False)
    assert first.train_loss == second.train_loss and first.epochs == second.epochs == 3
    for name, tensor in first_model.state_dict().items():
        assert torch.equal(second_model.state_dict()[name], tensor), name
    assert state["epoch"] == 1 and len(state["history"]["train_loss"]) == 1  # the state as made


def test_a_history_of_other_length_than_the_epochs_done_is_refused():
    state = stopped_after(2)
    history = {**state["history"], "train_loss": [0.5] * 6}
    with pytest.raises(TrainingStateError, match=r"2 epochs are done but its history holds 6 "
                                                 r"train_loss"):  # fmt: skip
        fit(vit(), problem(), epochs=3, batch_size=16, resume={**state, "history": history},
            progress=False)  # fmt: skip


def test_a_state_asked_for_after_its_epoch_is_refused():
    functions = {}
    fit(vit(), problem(), epochs=2, batch_size=16, progress=False,
        after_epoch=lambda done, state: functions.update({done: state}))  # fmt: skip
    with pytest.raises(RuntimeError, match=r"state\(\) of epoch 1 was called after fit went on"):
        functions[1]()
    with pytest.raises(RuntimeError, match=r"state\(\) of epoch 2 was called after"):
        functions[2]()
