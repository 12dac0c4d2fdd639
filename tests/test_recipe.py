"""vitbook.train.recipe.Recipe: the recipe as data, and fit taking it (or its fields as
keywords)."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest
import torch
from torch import nn

from vitbook.train import fit
from vitbook.train.recipe import Recipe


def data(n=24):
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(n, 1, 4, 4, generator=generator)
    return images, (images.mean(dim=(1, 2, 3)) > 0).long()


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(16, 2))


def test_to_dict_gives_every_field_in_field_order_and_keys_pick_a_layout():
    recipe = Recipe(label_smoothing=0.1, epochs=100, batch_size=64, lr=5e-3)
    assert list(recipe.to_dict()) == list(Recipe.names())
    assert recipe.to_dict()["weight_decay"] == 0.05  # a default is a field like any other
    layout = ("epochs", "lr", "batch_size", "label_smoothing")
    assert recipe.to_dict(keys=layout) == {"epochs": 100, "lr": 5e-3, "batch_size": 64,
                                           "label_smoothing": 0.1}  # fmt: skip
    assert list(recipe.to_dict(keys=layout[::-1])) == list(layout[::-1])  # the layout's order
    assert recipe.replace(seed=2).to_dict() == {**recipe.to_dict(), "seed": 2}
    with pytest.raises(ValueError, match=r"names 'augment', which is not a field of Recipe"):
        recipe.to_dict(keys=("epochs", "augment"))


def test_equal_recipes_write_equal_dicts_however_they_were_made():
    assert Recipe(epochs=3) == Recipe(epochs=3, lr=1e-3)
    assert Recipe(epochs=3).to_dict() == Recipe(epochs=3, lr=1e-3).to_dict()
    recipe = Recipe(epochs=5, lr=2e-3)
    by_method, by_dataclasses = recipe.replace(seed=1), dataclasses.replace(recipe, seed=1)
    assert by_method == by_dataclasses and by_method.to_dict() == by_dataclasses.to_dict()
    assert by_method.to_dict() == Recipe(epochs=5, lr=2e-3, seed=1).to_dict()
    assert vars(recipe).keys() == set(Recipe.names())  # no state besides the fields


def test_the_recorded_layouts_name_their_keys_beside_their_recipe():
    from vitbook.studies import experiments

    recorded = experiments.recorded_recipe()
    assert list(recorded) == [*experiments.RECORDED_FIELDS, "augment"]
    assert recorded == experiments.recorded_recipe(dataclasses.replace(experiments.RECIPE))
    assert experiments.load_results()["recipe"] == recorded  # the shipped file's layout


def test_a_recipe_survives_copies_and_pickles_with_its_layout():
    recipe = Recipe(epochs=5, lr=2e-3, warmup_epochs=1)
    for twin in (copy.copy(recipe), copy.deepcopy(recipe), pickle.loads(pickle.dumps(recipe))):
        assert twin == recipe and twin.to_dict() == recipe.to_dict()
    with pytest.raises(dataclasses.FrozenInstanceError):
        recipe.lr = 1.0


@pytest.mark.parametrize(
    ("fields", "error", "match"),
    [
        ({"epochs": 0}, ValueError, r"epochs=0 must be a positive int; use e.g. epochs=10"),
        ({"epochs": 2, "batch_size": 2.5}, ValueError, r"batch_size=2.5 must be a positive int"),
        ({"epochs": 2, "lr": "3e-3"}, TypeError, r"lr"),
        ({"epochs": 2, "lr": 0.0}, ValueError, r"lr=0.0 must be positive"),
        ({"epochs": 2, "warmup_epochs": 1, "warmup_steps": 5}, ValueError, r"pass one of them"),
        ({"epochs": 2, "optimizer": "adam"}, ValueError, r"optimizer='adam' is not supported"),
        ({"epochs": 2, "weight_decay_rule": "most"}, ValueError, r"weight_decay_rule='most'"),
        ({"epochs": 2, "label_smoothing": 1.0}, ValueError, r"label_smoothing"),
        ({"epochs": 2, "clip_grad_norm": 0.0}, ValueError, r"clip_grad_norm"),
        ({"epochs": 2, "accumulate": 0}, ValueError, r"accumulate"),
        ({"epochs": 2, "repeated_augmentation": 0}, ValueError, r"repeated_augmentation"),
        ({"epochs": 2, "precision": "fp8"}, ValueError, r"precision='fp8' is not supported"),
    ],
)
def test_a_recipe_refuses_what_fit_refuses_with_the_same_words(fields, error, match):
    with pytest.raises(error, match=match):
        Recipe(**fields)
    with pytest.raises(error, match=match):  # fit's keywords make the same recipe
        fit(model(), data(), progress=False, **fields)


def test_from_dict_reads_the_layout_and_refuses_what_is_not_a_field():
    recorded = {"epochs": 100, "lr": 0.005, "weight_decay": 0.05, "batch_size": 64,
                "warmup_epochs": 5, "label_smoothing": 0.1}  # as the results files hold it
    assert Recipe.from_dict(recorded).to_dict(keys=recorded) == recorded
    assert Recipe.from_dict(Recipe.from_dict(recorded).to_dict()) == Recipe.from_dict(recorded)
    with pytest.raises(ValueError, match=r"the recipe names 'augment', which is not a field"):
        Recipe.from_dict({**recorded, "augment": "random_shift(1)"})
    with pytest.raises(TypeError, match="a recipe is a dict of fields, got list"):
        Recipe.from_dict([("epochs", 1)])
    with pytest.raises(TypeError, match=r"Recipe has no field 'lrr'"):
        Recipe(epochs=1).replace(lrr=1.0)


def test_fit_takes_a_recipe_or_its_fields_alike():
    recipe = Recipe(epochs=4, lr=0.1, batch_size=8, warmup_epochs=0, seed=3)
    by_recipe, by_fields = model(), model()
    first = fit(by_recipe, data(), recipe, progress=False)
    second = fit(by_fields, data(), progress=False, **recipe.to_dict())
    assert first.train_loss == second.train_loss and first.precision == "fp32"
    for a, b in zip(by_recipe.parameters(), by_fields.parameters(), strict=True):
        assert torch.equal(a, b)
    changed = fit(model(), data(), recipe, seed=4, progress=False)  # a keyword changes it
    assert changed.train_loss != first.train_loss


def test_fit_names_a_wrong_recipe_a_missing_epochs_and_an_unknown_keyword():
    with pytest.raises(TypeError, match=r"recipe must be a vitbook.train.Recipe, got dict"):
        fit(model(), data(), {"epochs": 1}, progress=False)
    with pytest.raises(TypeError, match=r"missing 1 required keyword-only argument: 'epochs'"):
        fit(model(), data(), progress=False)
    with pytest.raises(TypeError, match=r"fit\(\) got an unexpected keyword argument 'lrr'"):
        fit(model(), data(), epochs=1, lrr=0.1, progress=False)


def test_fit_has_few_named_parameters():
    import inspect

    named = [p for p in inspect.signature(fit).parameters.values() if p.kind != p.VAR_KEYWORD]
    assert len(named) <= 14, [p.name for p in named]


def test_a_missing_or_unknown_field_is_named_with_the_fields_and_a_close_name():
    with pytest.raises(TypeError, match=r"missing .*'epochs'.*fields are epochs, lr, weight_decay"):
        Recipe()
    with pytest.raises(TypeError, match=r"'warmup'.*did you mean 'warmup_(steps|epochs)'.*fields "
                                        r"are epochs, lr"):  # fmt: skip
        Recipe(epochs=2, warmup=1)
    with pytest.raises(TypeError, match=r"keywords only"):
        Recipe(2)
    with pytest.raises(TypeError, match=r"fit\(\) got an unexpected keyword argument 'warmup'; "
                                        r"did you mean 'warmup_"):  # fmt: skip
        fit(model(), data(), Recipe(epochs=1), warmup=1, progress=False)
    with pytest.raises(TypeError, match=r"'epochs'.*the recipe's fields are epochs, lr"):
        fit(model(), data(), progress=False)
    with pytest.raises(TypeError, match=r"Recipe has no field 'lrr'; did you mean 'lr'\?"):
        Recipe(epochs=1).replace(lrr=1.0)


def test_a_seed_torch_cannot_take_is_refused_when_the_recipe_is_made():
    # torch.manual_seed takes -2**63 <= seed < 2**64 (torch 2.13) and says "Overflow when
    # unpacking long long" beyond.
    assert Recipe(epochs=1, seed=2**64 - 1).seed == 2**64 - 1
    assert Recipe(epochs=1, seed=-(2**63)).seed == -(2**63)
    for seed in (2**64, -(2**63) - 1):
        with pytest.raises(ValueError, match=rf"seed={seed} is outside torch's seeds, "
                                             r"-2\*\*63 <= seed < 2\*\*64"):  # fmt: skip
            Recipe(epochs=1, seed=seed)


def test_label_smoothing_in_the_mix_and_in_the_loss_is_refused_naming_which_to_keep():
    from vitbook.data.augment import mixup_cutmix
    from vitbook.train.distill import DistillationLoss

    images = torch.randn(24, 1, 4, 4, generator=torch.Generator().manual_seed(0))
    labels = torch.arange(24) % 3

    def three():
        torch.manual_seed(0)
        return nn.Sequential(nn.Flatten(), nn.Linear(16, 3))

    twice = r"smoothed twice.*mixup_cutmix\(\.\.\., label_smoothing=0\.1\) with label_smoothing=0"
    with pytest.raises(ValueError, match=twice):
        fit(three(), (images, labels), Recipe(epochs=1, label_smoothing=0.1), progress=False,
            mix=mixup_cutmix(3, label_smoothing=0.1))  # fmt: skip
    with pytest.raises(ValueError, match=r"smoothed twice.*the criterion's label_smoothing=0.1"):
        fit(three(), (images, labels), Recipe(epochs=1), progress=False,
            mix=mixup_cutmix(3, label_smoothing=0.1),
            criterion=DistillationLoss(None, "none", label_smoothing=0.1))  # fmt: skip
    once = [{"mix": mixup_cutmix(3, label_smoothing=0.1)},  # in the mix, as DeiT and timm
            {"mix": mixup_cutmix(3), "label_smoothing": 0.1}]  # in the loss, of mixed targets
    for arguments in once:
        assert fit(three(), (images, labels), epochs=1, progress=False, **arguments).epochs == 1
