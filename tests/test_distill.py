"""DeiT's distillation loss: its formulas, its teacher kept frozen, its inputs checked."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from vitbook import VisionTransformer, ViTConfig
from vitbook.train.distill import DistillationLoss, head_agreement

# Sizes all different: B=6 images of C=1 x 8 x 8, n_cls=5 classes.
B, N_CLS = 6, 5


def teacher_model() -> nn.Module:
    torch.manual_seed(1)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, N_CLS))


def student_model(**overrides) -> VisionTransformer:
    torch.manual_seed(2)
    config = ViTConfig(img_size=8, patch_size=2, in_chans=1, num_classes=N_CLS, embed_dim=16,
                       depth=1, num_heads=2, distilled=True, **overrides)  # fmt: skip
    return VisionTransformer(config)


@pytest.fixture
def batch():
    torch.manual_seed(0)
    images = torch.randn(B, 1, 8, 8)
    labels = torch.tensor([0, 1, 2, 3, 4, 0])
    outputs = (torch.randn(B, N_CLS, requires_grad=True), torch.randn(B, N_CLS, requires_grad=True))
    return images, labels, outputs


def test_hard_distillation_is_deits_formula(batch):
    images, labels, (logits, logits_dist) = batch
    teacher = teacher_model()
    loss = DistillationLoss(teacher, "hard", alpha=0.3)
    with torch.no_grad():
        y_t = teacher(images).argmax(dim=1)  # the teacher's hard decision
    expected = 0.7 * F.cross_entropy(logits, labels) + 0.3 * F.cross_entropy(logits_dist, y_t)
    torch.testing.assert_close(loss((logits, logits_dist), labels, images), expected)
    # alpha = 1/2 is the paper's equation: the mean of the two cross-entropies.
    half = DistillationLoss(teacher, "hard")((logits, logits_dist), labels, images)
    torch.testing.assert_close(
        half, (F.cross_entropy(logits, labels) + F.cross_entropy(logits_dist, y_t)) / 2
    )


@pytest.mark.parametrize("tau", [1.0, 3.0])
def test_soft_distillation_is_deits_formula(batch, tau):
    images, labels, (logits, logits_dist) = batch
    teacher = teacher_model()
    loss = DistillationLoss(teacher, "soft", alpha=0.4, tau=tau)
    with torch.no_grad():
        p_t = (teacher(images) / tau).softmax(dim=1)
    log_p_s = (logits_dist / tau).log_softmax(dim=1)
    # KL(p_t || p_s), summed over images and classes, times tau^2, over B * n_cls (DeiT's code).
    kl = (p_t * (p_t.log() - log_p_s)).sum() * tau**2 / (B * N_CLS)
    expected = 0.6 * F.cross_entropy(logits, labels) + 0.4 * kl
    torch.testing.assert_close(loss((logits, logits_dist), labels, images), expected)
    # batchmean: the KL per image, n_cls times DeiT's per-class mean.
    usual = DistillationLoss(teacher, "soft", alpha=0.4, tau=tau, kl_reduction="batchmean")
    expected = 0.6 * F.cross_entropy(logits, labels) + 0.4 * kl * N_CLS
    torch.testing.assert_close(usual((logits, logits_dist), labels, images), expected)
    reference = F.kl_div(log_p_s, p_t, reduction="batchmean") * tau**2  # PyTorch's own
    torch.testing.assert_close(kl * N_CLS, reference)


def test_tau_squared_keeps_the_soft_gradient_scale_as_tau_grows(batch):
    # Hinton et al.: the gradient of tau^2 KL with respect to z_s is tau (p_s - p_t), and for a
    # tau large against the logits' spread p_s - p_t is about (z_s - z_t) / (tau n_cls) (less
    # their means), so the product does not depend on tau; without tau^2 it would shrink as
    # 1 / tau^2. The gradients' norms at tau = 4 and tau = 8 show it.
    images, labels, _ = batch
    teacher = teacher_model()
    with torch.no_grad():
        z_t = teacher(images)
    z_s = torch.zeros(B, N_CLS, requires_grad=True)
    norms = {}
    for tau in (4.0, 8.0):
        z_s.grad = None
        loss = DistillationLoss(teacher, "soft", alpha=1.0, tau=tau)
        loss((z_s, z_s), labels, images).backward()
        norms[tau] = z_s.grad.norm().item()
        p_t, p_s = (z_t / tau).softmax(1), (z_s / tau).softmax(1)
        torch.testing.assert_close(z_s.grad, tau * (p_s - p_t).detach() / (B * N_CLS))
    # (p_s - p_t) ~ (z_t - mean) / (tau * n_cls) for large tau: the product is about constant.
    assert abs(norms[8.0] / norms[4.0] - 1) < 0.2


def test_none_trains_both_heads_on_the_labels_and_never_runs_a_teacher(batch):
    # The control "the distillation token without a teacher": each head gets the labels, with
    # the weights the heads have under distillation, so that evaluation, which averages the
    # heads, never averages in an untrained one.
    images, labels, (logits, logits_dist) = batch

    class Refuses(nn.Module):
        def forward(self, images):
            raise AssertionError("the teacher must not run for distillation_type='none'")

    for teacher in (None, Refuses()):
        loss = DistillationLoss(teacher, "none", alpha=0.3, label_smoothing=0.1)
        value = loss((logits, logits_dist), labels, images)
        expected = 0.7 * F.cross_entropy(logits, labels, label_smoothing=0.1) + (
            0.3 * F.cross_entropy(logits_dist, labels, label_smoothing=0.1))  # fmt: skip
        torch.testing.assert_close(value, expected)
        one = loss(logits, labels, images)  # a plain model: the labels' loss alone
        torch.testing.assert_close(one, F.cross_entropy(logits, labels, label_smoothing=0.1))
    student = student_model().train()
    DistillationLoss(None, "none")(student(images), labels, images).backward()
    for head in (student.head, student.head_dist):
        assert head.weight.grad.abs().sum() > 0
    # A teacher that is not used is not frozen either.
    unused = teacher_model()
    DistillationLoss(unused, "none")
    assert all(p.requires_grad for p in unused.parameters())


def test_fit_trains_the_distillation_head_without_a_teacher():
    from vitbook.train import fit

    torch.manual_seed(0)
    images, labels = torch.rand(24, 1, 8, 8), torch.arange(24) % N_CLS
    student = student_model()
    start = student.head_dist.weight.detach().clone()
    fit(student, (images, labels), epochs=1, batch_size=8, criterion=DistillationLoss(None, "none"),
        progress=False)  # fmt: skip
    assert not torch.equal(student.head_dist.weight, start)


def test_soft_targets_after_mixup_and_label_smoothing_on_the_labels_only(batch):
    images, labels, (logits, logits_dist) = batch
    teacher = teacher_model()
    mixed = 0.7 * F.one_hot(labels, N_CLS) + 0.3 * F.one_hot(labels.roll(1), N_CLS)  # (B, n_cls)
    loss = DistillationLoss(teacher, "hard", label_smoothing=0.1)
    with torch.no_grad():
        y_t = teacher(images).argmax(dim=1)
    smoothed = 0.9 * mixed + 0.1 / N_CLS
    base = -(smoothed * logits.log_softmax(dim=1)).sum(dim=1).mean()
    expected = 0.5 * base + 0.5 * F.cross_entropy(logits_dist, y_t)  # no smoothing on y_t
    torch.testing.assert_close(loss((logits, logits_dist), mixed.float(), images), expected)


def test_each_head_gets_its_own_target():
    # alpha = 1: only the distillation term, which reaches head_dist and not head; alpha = 0:
    # only the labels, which reach head and not head_dist.
    torch.manual_seed(0)
    images, labels = torch.randn(B, 1, 8, 8), torch.tensor([0, 1, 2, 3, 4, 0])
    for alpha, trained, untouched in ((1.0, "head_dist", "head"), (0.0, "head", "head_dist")):
        student = student_model().train()
        loss = DistillationLoss(teacher_model(), "hard", alpha=alpha)
        loss(student(images), labels, images).backward()
        assert getattr(student, trained).weight.grad.abs().sum() > 0
        assert getattr(student, untouched).weight.grad.abs().sum() == 0
        assert student.dist_token.grad is not None


def test_the_teacher_is_frozen_and_stays_in_eval_mode():
    torch.manual_seed(0)
    teacher = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.Flatten(),
                            nn.Linear(4 * 6 * 6, N_CLS)).train()  # fmt: skip
    running = teacher[1].running_mean.clone()
    loss = DistillationLoss(teacher, "soft")
    assert not teacher.training
    loss.train()  # what a training loop might do to every module it sees
    assert not teacher.training and loss.training
    student = student_model().train()
    images, labels = torch.randn(B, 1, 8, 8), torch.tensor([0, 1, 2, 3, 4, 0])
    loss(student(images), labels, images).backward()
    assert not any(p.requires_grad for p in teacher.parameters())  # frozen at the first call
    assert all(p.grad is None for p in teacher.parameters())
    torch.testing.assert_close(teacher[1].running_mean, running, rtol=0, atol=0)
    teacher.train()  # by hand, after the loss was built: refused on the next call
    with pytest.raises(ValueError, match=r"teacher is in train mode.*Call teacher\.eval\(\)"):
        loss(student(images), labels, images)


def test_a_student_given_as_its_own_teacher_is_refused_with_the_fix():
    from vitbook.train import fit

    torch.manual_seed(0)
    images, labels = torch.rand(16, 1, 8, 8), torch.arange(16) % N_CLS
    student = student_model()
    loss = DistillationLoss(student, "hard")
    with pytest.raises(ValueError, match=r"depend on \d+ of the teacher's parameters: the "
                       r"teacher is the student.*copy\.deepcopy"):  # fmt: skip
        loss(student.train()(images), labels, images)
    assert all(p.requires_grad for p in student.parameters())  # not frozen behind its back
    with pytest.raises(ValueError, match="teacher is the student"):  # fit says so too
        fit(student, (images, labels), epochs=1, batch_size=8, criterion=loss, progress=False)
    wrapped = nn.Sequential(nn.Identity(), student)  # sharing the weights is the same mistake
    with pytest.raises(ValueError, match="teacher is the student, or shares its weights"):
        DistillationLoss(wrapped, "soft")(student.train()(images), labels, images)
    frozen = student_model().requires_grad_(False).train()
    measure = DistillationLoss(teacher_model(), "hard")
    with pytest.raises(ValueError, match="carry no gradient, so nothing would train"):
        measure(frozen(images), labels, images)
    with torch.no_grad():  # measuring a loss without training is fine
        assert torch.isfinite(measure(frozen(images), labels, images))
    import copy

    trained = student_model()
    fit(trained, (images, labels), epochs=1, batch_size=8, progress=False,
        criterion=DistillationLoss(copy.deepcopy(trained), "hard"))  # the fix works


@pytest.mark.parametrize("kind", ["hard", "soft"])
def test_a_teacher_with_non_finite_logits_is_refused_not_argmaxed(batch, kind):
    images, labels, outputs = batch

    class Broken(nn.Module):  # a teacher whose weights went bad: NaN for two images
        def __init__(self, rows):
            super().__init__()
            self.rows, self.net = rows, teacher_model()

        def forward(self, images):
            logits = self.net(images)
            logits[self.rows] = float("nan")
            return logits

    with pytest.raises(ValueError, match=r"non-finite logits \(NaN or inf\) for 2 of 6 images"):
        DistillationLoss(Broken([1, 4]), kind)(outputs, labels, images)
    # After a clean first batch, a later NaN makes the loss NaN (for fit's check), not a target.
    teacher = Broken([])
    loss = DistillationLoss(teacher, kind)
    assert torch.isfinite(loss(outputs, labels, images))
    teacher.rows = [2]
    assert torch.isnan(loss(outputs, labels, images))


def test_a_teacher_returning_probabilities_is_refused_where_soft_targets_would_be_wrong(batch):
    images, labels, outputs = batch
    probabilities = nn.Sequential(teacher_model(), nn.Softmax(dim=1))  # rows >= 0 summing to 1
    with pytest.raises(ValueError, match=r"the teacher returned probabilities .* for all 6 "
                                         r"images.*drop its softmax"):  # fmt: skip
        DistillationLoss(probabilities, "soft")(outputs, labels, images)
    # log-probabilities are logits shifted per row: the same soft targets, accepted
    log_probabilities = nn.Sequential(teacher_model(), nn.LogSoftmax(dim=1))
    with torch.no_grad():
        plain = DistillationLoss(teacher_model(), "soft", tau=2.0)(outputs, labels, images)
        shifted = DistillationLoss(log_probabilities, "soft", tau=2.0)(outputs, labels, images)
    torch.testing.assert_close(plain, shifted)
    # hard distillation reads the argmax, which probabilities keep: the loss is exact
    with torch.no_grad():
        exact = DistillationLoss(teacher_model(), "hard")(outputs, labels, images)
        hard = DistillationLoss(nn.Sequential(teacher_model(), nn.Softmax(dim=1)), "hard")
        assert torch.equal(hard(outputs, labels, images), exact)


def test_fit_stops_when_the_teacher_goes_non_finite_later():
    from vitbook.train import fit

    torch.manual_seed(0)
    images, labels = torch.rand(16, 1, 8, 8), torch.arange(16) % N_CLS
    calls = []

    class Decays(nn.Module):  # finite on the first batch, NaN from the second on
        def __init__(self):
            super().__init__()
            self.net = teacher_model()

        def forward(self, images):
            calls.append(1)
            logits = self.net(images)
            return logits if len(calls) == 1 else logits * float("nan")

    student = student_model()
    with pytest.raises(ValueError, match="loss is nan"):
        fit(student, (images, labels), epochs=1, batch_size=8, progress=False,
            criterion=DistillationLoss(Decays(), "hard"))  # fmt: skip


def test_the_teacher_runs_in_the_callers_autocast_without_gradients(batch):
    images, labels, outputs = batch
    seen = {}
    teacher = teacher_model()
    teacher.register_forward_hook(
        lambda module, inputs, output: seen.update(dtype=output.dtype, grad=output.requires_grad)
    )
    loss = DistillationLoss(teacher, "soft", tau=2.0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        value = loss(tuple(o.bfloat16() for o in outputs), labels, images)
    assert seen == {"dtype": torch.bfloat16, "grad": False}
    assert value.dtype == torch.float32  # the loss itself in float32


def test_single_head_puts_both_terms_on_one_output(batch):
    images, labels, (logits, _) = batch
    teacher = teacher_model()
    with torch.no_grad():
        y_t = teacher(images).argmax(dim=1)
    loss = DistillationLoss(teacher, "hard", single_head=True)
    expected = (F.cross_entropy(logits, labels) + F.cross_entropy(logits, y_t)) / 2
    torch.testing.assert_close(loss(logits, labels, images), expected)


def test_outputs_and_arguments_are_checked(batch):
    images, labels, (logits, logits_dist) = batch
    teacher = teacher_model()
    hard = DistillationLoss(teacher, "hard")
    with pytest.raises(TypeError, match=r"one tensor of logits.*ViTConfig\(distilled=True\)"):
        hard(logits, labels, images)
    with pytest.raises(TypeError, match="a \\(class, distillation\\) pair.*got list of length 3"):
        hard([logits, logits, logits], labels, images)
    with pytest.raises(TypeError, match="got tuple of length 2 with single_head=True"):
        DistillationLoss(teacher, "hard", single_head=True)((logits, logits_dist), labels, images)
    with pytest.raises(ValueError, match=r"distillation logits have shape \(6, 4\)"):
        hard((logits, logits_dist[:, :4]), labels, images)
    wrong_classes = nn.Sequential(nn.Flatten(), nn.Linear(64, N_CLS + 2))
    with pytest.raises(ValueError, match=r"teacher's logits have shape \(6, 7\).*\(6, 5\)"):
        DistillationLoss(wrong_classes, "hard")((logits, logits_dist), labels, images)
    with pytest.raises(ValueError, match="distillation_type='medium' is not supported"):
        DistillationLoss(teacher, "medium")
    with pytest.raises(ValueError, match="alpha=1.5 must be a finite number >= 0 and <= 1"):
        DistillationLoss(teacher, alpha=1.5)
    with pytest.raises(ValueError, match="tau=0 must be a finite number > 0; DeiT uses 1.0"):
        DistillationLoss(teacher, "soft", tau=0)
    with pytest.raises(ValueError, match="kl_reduction='sum' is not supported"):
        DistillationLoss(teacher, "soft", kl_reduction="sum")
    with pytest.raises(TypeError, match="distillation_type='hard' needs a teacher"):
        DistillationLoss(None, "hard")
    with pytest.raises(TypeError, match="teacher must be a torch.nn.Module"):
        DistillationLoss(lambda images: images, "hard")


def test_head_agreement_counts_where_the_heads_agree():
    student = student_model()
    torch.manual_seed(3)
    images = torch.randn(7, 1, 8, 8)
    result = head_agreement(student.train(), images)
    assert not student.training  # measured in eval mode, left there
    with torch.no_grad():
        features = student.forward_features(images)  # (B, 2 + 16, D)
        by_class = student.head(features[:, 0]).argmax(dim=1)
        by_dist = student.head_dist(features[:, 1]).argmax(dim=1)
        torch.testing.assert_close(result["mean"], student(images).argmax(dim=1))
    torch.testing.assert_close(result["class"], by_class)
    torch.testing.assert_close(result["distillation"], by_dist)
    assert result["agreement"] == pytest.approx((by_class == by_dist).float().mean().item())
    with torch.no_grad():  # heads that ignore the tokens and always say class 0, or 0 and 1
        for head in (student.head, student.head_dist):
            head.weight.zero_()
            head.bias.copy_(torch.tensor([1.0, 0, 0, 0, 0]))
    assert head_agreement(student, images)["agreement"] == 1.0
    with torch.no_grad():
        student.head_dist.bias.copy_(torch.tensor([0, 1.0, 0, 0, 0]))
    assert head_agreement(student, images)["agreement"] == 0.0
    plain = VisionTransformer(ViTConfig(img_size=8, patch_size=2, in_chans=1, num_classes=5,
                                        embed_dim=16, depth=1, num_heads=2))  # fmt: skip
    with pytest.raises(TypeError, match="distilled=False"):
        head_agreement(plain, images)
    with pytest.raises(ValueError, match="NaN"):
        head_agreement(student, torch.full((2, 1, 8, 8), float("nan")))


def test_fit_trains_a_student_through_the_loss_and_leaves_the_teacher_as_it_was():
    from vitbook.train import fit

    torch.manual_seed(0)
    images, labels = torch.rand(24, 1, 8, 8), torch.arange(24) % N_CLS
    teacher = teacher_model()
    before = {k: v.clone() for k, v in teacher.state_dict().items()}
    seen = []
    teacher.register_forward_hook(
        lambda module, inputs, output: seen.append((inputs[0].min().item(), output.dtype))
    )

    def brighten(batch, generator):  # an augmentation the teacher must see too
        return batch + 100.0

    student = student_model()
    start = {k: v.clone() for k, v in student.state_dict().items()}
    history = fit(student, (images, labels), epochs=2, batch_size=8, augment=brighten,
                  criterion=DistillationLoss(teacher, "soft", tau=2.0), precision="bf16",
                  progress=False)  # fmt: skip
    assert history.epochs == 2 and all(torch.isfinite(torch.tensor(history.train_loss)))
    assert len(seen) == 6  # once per step: 3 steps of 8 images, 2 epochs
    assert all(low >= 100.0 for low, _ in seen)  # the augmented batch the student saw
    assert all(dtype == torch.bfloat16 for _, dtype in seen)  # in fit's autocast
    assert not teacher.training
    for name, tensor in teacher.state_dict().items():
        assert torch.equal(tensor, before[name]), name
    changed = [k for k, v in student.state_dict().items() if not torch.equal(v, start[k])]
    assert "dist_token" in changed and "head_dist.weight" in changed
