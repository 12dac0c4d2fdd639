"""The photo ViT's training step on a CPU: each speed change against the plain step, in one run.

The CPU recording (``scripts/train_cifar10.py --plan cpu``) trains
``vitbook.studies.cpu_photos.CPU_VIT`` (D = 192, 6 blocks, 65 tokens) on 45,000 photos. Before it
was recorded, every change to its step was measured here against the plain step, interleaved in
one process (``benchmarks/common.py``): one training step (augmentation, forward, cross-entropy,
backward, AdamW) of a batch of photos, reported as images per second and as the ratio to the
plain step. The plain step is fp32, PyTorch's fused attention (``attn_impl="sdpa"``), batch 128,
2 threads, eager. The changes:

* threads: 1 instead of 2;
* channels-last: the photos in ``torch.channels_last`` memory order;
* batch size: 256 and 512;
* bf16 autocast, with the fused attention and with the explicit path (``attn_impl="explicit"``);
* ``torch.compile`` of the forward pass and loss, with bf16 and the explicit path;
* data kept as uint8 (a quarter of the memory) and converted to float32 per batch before the
  crop and flip, against float32 photos (the crop and flip drawn for the whole batch at once in
  both);
* the evaluation cadence: one pass over the 5,000 validation photos as a share of an epoch's
  steps.

Each step's work is counted once, by ``torch.utils.flop_counter`` on the explicit path (the
counter sees no FLOPs inside the fused CPU attention kernel), as three times the forward
pass's FLOPs; GFLOP/s are set beside the machine's own large matmul rate (2048 x 2048) in fp32
and bf16, timed interleaved with the steps.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.common import MIN_REPEATS, Table, interleaved_times, median, undisturbed
from vitbook import VisionTransformer, ViTConfig
from vitbook.data import augment
from vitbook.data.cifar import CIFAR10_MEAN, CIFAR10_STD, Normalize
from vitbook.studies.cpu_photos import CPU_VIT

EPOCH_PHOTOS, VAL_PHOTOS = 45_000, 5_000


def _model(attn_impl: str, quick: bool) -> nn.Module:
    fields = {**CPU_VIT, "attn_impl": attn_impl}
    if quick:
        fields.update(embed_dim=32, depth=1, num_heads=2)
    torch.manual_seed(0)
    vit = VisionTransformer(ViTConfig(**fields))
    return nn.Sequential(Normalize(CIFAR10_MEAN, CIFAR10_STD), vit)


def train_flops(quick: bool = False) -> int:
    """FLOPs of one photo's training step: three times its forward pass on the explicit path."""
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        _model("explicit", quick).eval()(torch.rand(1, 3, 32, 32))
    return 3 * counter.get_total_flops()


def step(*, batch: int = 128, threads: int = 2, precision: str = "fp32", attn_impl: str = "sdpa",
         compile: bool = False, channels_last: bool = False, uint8: bool = False,
         quick: bool = False) -> Callable[[], None]:  # fmt: skip
    """One training step of the photo ViT on a fixed batch, as the recording takes it."""
    model = _model(attn_impl, quick).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    generator = torch.Generator().manual_seed(0)
    photos = torch.randint(0, 256, (batch, 3, 32, 32), dtype=torch.uint8, generator=generator)
    stored = photos if uint8 else photos.float() / 255
    labels = torch.randint(0, 10, (batch,), generator=generator)
    crop_flip = augment.random_crop_flip(padding=4)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32

    def loss_of(images: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=dtype, enabled=precision == "bf16"):
            logits = model(images)
        return nn.functional.cross_entropy(logits.float(), targets, label_smoothing=0.1)

    forward = torch.compile(loss_of, fullgraph=True, dynamic=False) if compile else loss_of

    def run() -> None:
        torch.set_num_threads(threads)
        images = crop_flip(stored.float().div_(255) if uint8 else stored, generator)
        if channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        loss = forward(images, labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return run


def augmentation(*, batch: int, uint8: bool) -> Callable[[], None]:
    """The crop and flip of one batch alone, from float32 or from uint8 photos."""
    generator = torch.Generator().manual_seed(0)
    photos = torch.randint(0, 256, (batch, 3, 32, 32), dtype=torch.uint8, generator=generator)
    stored = photos if uint8 else photos.float() / 255
    crop_flip = augment.random_crop_flip(padding=4)

    def run() -> None:
        torch.set_num_threads(2)
        crop_flip(stored.float().div_(255) if uint8 else stored, generator)

    return run


def evaluation(*, quick: bool, photos: int) -> Callable[[], None]:
    """One pass of the model over ``photos`` validation photos, batch 512, bf16, explicit."""
    model = _model("explicit", quick).eval()
    images = torch.rand(photos, 3, 32, 32)

    def run() -> None:
        torch.set_num_threads(2)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            for start in range(0, photos, 512):
                model(images[start:start + 512])

    return run


def matmul(dtype: torch.dtype, n: int) -> Callable[[], None]:
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)

    def run() -> None:
        torch.set_num_threads(2)
        a @ b

    return run


CHANGES = {  # name -> (the change, step keywords)
    "plain": ("fp32, sdpa, batch 128, 2 threads, eager", {}),
    "1 thread": ("threads: 1 instead of 2", {"threads": 1}),
    "channels-last": ("photos in channels-last memory order", {"channels_last": True}),
    "batch 256": ("batch 256", {"batch": 256}),
    "batch 512": ("batch 512", {"batch": 512}),
    "bf16": ("bf16 autocast (fused attention)", {"precision": "bf16"}),
    "bf16 explicit": ("bf16 autocast, explicit attention", {"precision": "bf16",
                                                             "attn_impl": "explicit"}),
    "bf16 explicit b256": ("bf16, explicit attention, batch 256",
                           {"precision": "bf16", "attn_impl": "explicit", "batch": 256}),
    "bf16 explicit b256 uint8": ("... with uint8 photos converted per batch",
                                 {"precision": "bf16", "attn_impl": "explicit", "batch": 256,
                                  "uint8": True}),
    "bf16 explicit b256 compiled": ("... with torch.compile",
                                    {"precision": "bf16", "attn_impl": "explicit", "batch": 256,
                                     "compile": True}),
}  # fmt: skip


# On a CPU without bf16 units (no AMX, no AVX-512 bf16: most laptops, the AMD EPYC this book was
# first tested on) oneDNN has no fast bf16 kernels. This machine is made one by capping oneDNN
# below them, in a process of its own (the cap is read when oneDNN starts).
NO_BF16_UNITS = {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}


def _no_units_child(quick: bool) -> None:
    """In a process with NO_BF16_UNITS: the plain step against bf16, printed as JSON."""
    import json

    steps = {"plain": step(quick=quick),
             "bf16 explicit b256": step(precision="bf16", attn_impl="explicit", batch=256,
                                        quick=quick)}  # fmt: skip
    times = interleaved_times(steps, warmup=2, repeats=MIN_REPEATS)
    print(json.dumps({"plain": 128 / median(times["plain"]),
                      "bf16 explicit b256": 256 / median(times["bf16 explicit b256"])}))


def without_bf16_units(quick: bool) -> dict[str, float]:
    """images/s of the plain step and of bf16 where oneDNN may not use bf16 instructions."""
    import json
    import subprocess
    import sys

    from benchmarks.common import ROOT, subprocess_env

    code = f"from benchmarks.photos_cpu import _no_units_child; _no_units_child({quick})"
    env = {**subprocess_env(), **NO_BF16_UNITS}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, check=True, timeout=900).stdout  # fmt: skip
    return json.loads(out.strip().splitlines()[-1])


def run(quick: bool = False) -> list[Table]:
    before = torch.get_num_threads()
    repeats = MIN_REPEATS if quick else 8
    flops = train_flops(quick)
    try:
        changes = dict(list(CHANGES.items())[:3]) if quick else CHANGES
        steps = {name: step(**keywords, quick=quick) for name, (_, keywords) in changes.items()}
        batches = {name: keywords.get("batch", 128) for name, (_, keywords) in changes.items()}
        n = 256 if quick else 2048
        limits = {"matmul fp32": matmul(torch.float32, n), "matmul bf16": matmul(torch.bfloat16, n)}

        def measure() -> dict[str, list[float]]:
            return interleaved_times({**steps, **limits}, warmup=3, repeats=repeats)

        times, others, _ = undisturbed(measure, "photo ViT steps", retry=not quick)
        rates = {name: 2 * n**3 / median(times[name]) / 1e9 for name in limits}
        speed = Table(
            key="photos-cpu",
            title="The photo ViT's training step on the CPU (2 threads unless said): images/s, "
            "and against the plain step",
            columns=["change", "what", "images/s", "/ plain", "GFLOP/s", "of fp32 matmul",
                     "of bf16 matmul", "epoch min"],
            formats=["", "", ".0f", ".2f", ".0f", ".0%", ".0%", ".2f"],
        )  # fmt: skip
        plain = batches["plain"] / median(times["plain"])
        for name, (what, _) in changes.items():
            images = batches[name] / median(times[name])
            gflops = images * flops / 1e9
            speed.add(name, what, images, images / plain, gflops, gflops / rates["matmul fp32"],
                      gflops / rates["matmul bf16"], EPOCH_PHOTOS / images / 60)  # fmt: skip
        speed.notes += [
            f"One photo's training step: {flops / 1e6:.0f} MFLOP (three times its forward pass, "
            "counted on the explicit path). The machine's 2048 x 2048 matmul on 2 threads, timed "
            f"interleaved with the steps: {rates['matmul fp32']:.0f} GFLOP/s in fp32, "
            f"{rates['matmul bf16']:.0f} GFLOP/s in bf16.",
            f"epoch min: {EPOCH_PHOTOS:,} photos at that rate, without validation. "
            f"Other processes took {others or 0:.0%} of the CPU during the measurement.",
        ]
        speed.data = {"images_per_s": {name: batches[name] / median(times[name])
                                       for name in changes},
                      "matmul_gflops": rates, "train_mflop_per_photo": flops / 1e6}  # fmt: skip
        extra = {"aug float32": augmentation(batch=256, uint8=False),
                 "aug uint8": augmentation(batch=256, uint8=True),
                 "validation pass": evaluation(quick=quick, photos=512 if quick else VAL_PHOTOS)}
        if "bf16 explicit b256" in steps:
            extra["step"] = steps["bf16 explicit b256"]
        else:
            extra["step"] = steps["plain"]
        parts, others, _ = undisturbed(
            lambda: interleaved_times(extra, warmup=2, repeats=repeats), "epoch parts",
            retry=not quick)  # fmt: skip
        step_s = median(parts["step"])
        steps_per_epoch = EPOCH_PHOTOS / (256 if "bf16 explicit b256" in steps else 128)
        cost = Table(
            key="photos-cpu-parts",
            title="What else an epoch costs: the crop and flip of a batch of 256 and one "
            "validation pass, against the step",
            columns=["part", "ms", "share of a step", "share of an epoch"],
            formats=["", ".1f", ".1%", ".1%"],
        )
        for name in ("aug float32", "aug uint8"):
            seconds = median(parts[name])
            cost.add(name, seconds * 1e3, seconds / step_s, None)
        seconds = median(parts["validation pass"])
        cost.add("validation pass", seconds * 1e3, None, seconds / (step_s * steps_per_epoch))
        cost.notes.append(
            "share of an epoch: one validation pass over the validation photos against the "
            f"{steps_per_epoch:.0f} steps of an epoch (validation after every epoch). Other "
            f"processes took {others or 0:.0%} of the CPU."
        )
        units = without_bf16_units(quick)
        if "bf16 explicit b256" in steps:
            speed.add("bf16, no bf16 units", "bf16, explicit, batch 256, oneDNN capped at "
                      f"{NO_BF16_UNITS['ONEDNN_MAX_CPU_ISA']}", units["bf16 explicit b256"],
                      units["bf16 explicit b256"] / units["plain"], None, None, None,
                      EPOCH_PHOTOS / units["bf16 explicit b256"] / 60)  # fmt: skip
        speed.notes.append(
            "bf16, no bf16 units: measured in a process of its own with oneDNN capped below "
            "this CPU's bf16 instructions (as on a CPU without them), against that process's "
            f"own plain step ({units['plain']:.0f} images/s there)."
        )
        speed.data["no_bf16_units"] = units
        return [speed, cost]
    finally:
        torch.set_num_threads(before)
