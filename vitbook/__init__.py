"""vitbook: a Vision Transformer built piece by piece, the package behind the book.

Modules, in the order of the chapters: :mod:`vitbook.patches`, :mod:`vitbook.positional`,
:mod:`vitbook.attention`, :mod:`vitbook.encoder`, :mod:`vitbook.config` and :mod:`vitbook.vit`,
:mod:`vitbook.stem` (a convolutional stem), :mod:`vitbook.axial`.
Helpers, imported on demand: :mod:`vitbook.data` (sample photos and digits, offline),
:mod:`vitbook.train` (the training loop, mixed precision, torchrun) with :mod:`vitbook.optim`
(AdamW, weight-decay rules, warm-up and cosine schedules), :mod:`vitbook.train_step` (one
optimiser step, accumulation and the divergence guard) and :mod:`vitbook.evaluation`;
:mod:`vitbook.augment` (per-image augmentation on the device) with :mod:`vitbook.image_ops`,
:mod:`vitbook.randaugment` and :mod:`vitbook.mixing` (MixUp and CutMix);
:mod:`vitbook.runtime` (where a chapter runs: GPU, Colab, data), :mod:`vitbook.cifar`
(CIFAR-10 and its offline stand-in), :mod:`vitbook.ladder` (the photo chapter's recorded runs),
:mod:`vitbook.records` (results files that never overwrite recorded runs),
:mod:`vitbook.resume` (a training run's whole state, saved and continued bit for bit),
:mod:`vitbook.session` (recording a plan of runs in GPU sessions of any length),
:mod:`vitbook.recording` (what a possibly partial recording holds of its plan),
:mod:`vitbook.comparison` (paired differences of two recorded settings over their seeds),
:mod:`vitbook.numerics` (how far two computations of the same numbers may be apart),
:mod:`vitbook.distill` and :mod:`vitbook.distill_digits` (DeiT's distillation and its measured
miniature), :mod:`vitbook.analysis`,
:mod:`vitbook.pretrained` (the shipped digits models and Hugging Face checkpoints),
:mod:`vitbook.checkpoints` (saving and loading vitbook model files), :mod:`vitbook.baselines`
(CNNs for the digits and for photos), :mod:`vitbook.experiments` (the measured
experiments shipped with the package), :mod:`vitbook.transfer` and :mod:`vitbook.transfer_digits`
(fine-tuning a pretrained ViT, and its measured miniature), :mod:`vitbook.tables` (result
tables for the HTML book, notebooks and terminals), :mod:`vitbook.convert` and
:mod:`vitbook.hf_config` (timm and Hugging Face state dicts and configurations),
:mod:`vitbook.plotting` (matplotlib figures), :mod:`vitbook.widgets` and
:mod:`vitbook.explorer` (interactive figures) and :mod:`vitbook.playground` (the digit
playground).
Importing vitbook has no side effects and imports no optional dependency.
"""

from vitbook.attention import (
    MultiHeadSelfAttention,
    SingleHeadAttention,
    scaled_dot_product_attention,
)
from vitbook.axial import AxialAttention, AxialEncoderBlock, axial_attention_mask
from vitbook.encoder import MLP, EncoderBlock
from vitbook.patches import (
    LinearPatchEmbedding,
    PatchEmbedding,
    conv_weight_from_linear,
    linear_weight_from_conv,
    patchify,
    unpatchify,
)
from vitbook.positional import (
    LearnedPositionEmbedding,
    RelativePositionBias,
    resample_pos_embed,
    sincos_1d,
    sincos_2d,
)
from vitbook.vit import PRESETS, VisionTransformer, ViTConfig

__version__ = "0.1.0"

__all__ = [
    "MLP",
    "PRESETS",
    "AxialAttention",
    "AxialEncoderBlock",
    "EncoderBlock",
    "LearnedPositionEmbedding",
    "LinearPatchEmbedding",
    "MultiHeadSelfAttention",
    "PatchEmbedding",
    "RelativePositionBias",
    "SingleHeadAttention",
    "ViTConfig",
    "VisionTransformer",
    "__version__",
    "axial_attention_mask",
    "conv_weight_from_linear",
    "linear_weight_from_conv",
    "patchify",
    "resample_pos_embed",
    "scaled_dot_product_attention",
    "sincos_1d",
    "sincos_2d",
    "unpatchify",
]
