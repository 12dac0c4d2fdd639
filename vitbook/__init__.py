"""vitbook: a Vision Transformer built piece by piece, the package behind the book.

The ViT, in the order of the chapters, at the top; everything else in folders by role. Imports
run downwards only: the model imports no folder, and each folder only those above it in this list.

.. code-block:: text

    vitbook/
      patches.py positional.py attention.py encoder.py config.py vit.py   the ViT, by chapter
      stem.py axial.py                  its variants: a convolutional stem, axial attention
      baselines.py analysis.py          the CNNs it is measured against; read-outs of a model
      _checks.py _files.py              input checks; the shipped assets and safe file writes
      data/         offline photos and digits, CIFAR-10, augmentation on the device
      train/        fit and its Recipe, the step, optimizers, evaluation, resuming, distillation
      pretrained/   the shipped digits ViTs, Hugging Face and timm checkpoints, transfer tools
      studies/      the book's measured experiments, their recording and their comparison
      plotting/     matplotlib figures and result tables
      widgets/      interactive figures and the digit playground (imported on demand)
      assets/       the shipped models and recorded results

``import vitbook`` gives the model's parts below; it has no side effects and imports no optional
dependency.
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
