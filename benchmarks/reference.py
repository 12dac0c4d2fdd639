"""The reference ViT: PyTorch's own ``nn.TransformerEncoderLayer`` with vitbook's weights copied in.

The encoder blocks are ``nn.TransformerEncoderLayer(norm_first=True, activation="gelu",
batch_first=True, layer_norm_eps=1e-6)``, i.e. the pre-norm ViT block with exact GELU and timm's
epsilon. The parts around the encoder (patch embedding, class token, position embeddings, final
LayerNorm, head) are copies of vitbook's modules: they are the same operations either way, and
copying them keeps the comparison about the encoder.

In eval mode under ``torch.inference_mode()``, each ``nn.TransformerEncoderLayer`` runs PyTorch's
native fused "fast path" (one ``aten::_transformer_encoder_layer_fwd`` call per block), which is
the honest thing to race against; in training it runs the regular ``nn.MultiheadAttention`` path.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from vitbook import EncoderBlock, VisionTransformer

FAST_PATH_OP = "aten::_transformer_encoder_layer_fwd"
# fp32, the same maths in another summation order (fused kernels, other GEMM blocking):
# differences are rounding only, a few 1e-6 on ViT-B/16's logits and features.
TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}


def copy_block_weights(block: EncoderBlock, layer: nn.TransformerEncoderLayer) -> None:
    """Copy one vitbook block into a ``nn.TransformerEncoderLayer`` (same mapping as the tests).

    ``attn.qkv`` is ``in_proj`` (rows ordered q, k, v), ``attn.proj`` is ``out_proj``,
    ``mlp.fc1`` / ``mlp.fc2`` are ``linear1`` / ``linear2``, ``norm1`` / ``norm2`` keep their names.
    """
    with torch.no_grad():
        layer.self_attn.in_proj_weight.copy_(block.attn.qkv.weight)
        layer.self_attn.in_proj_bias.copy_(block.attn.qkv.bias)
        layer.self_attn.out_proj.weight.copy_(block.attn.proj.weight)
        layer.self_attn.out_proj.bias.copy_(block.attn.proj.bias)
        layer.linear1.load_state_dict(block.mlp.fc1.state_dict())
        layer.linear2.load_state_dict(block.mlp.fc2.state_dict())
        layer.norm1.load_state_dict(block.norm1.state_dict())
        layer.norm2.load_state_dict(block.norm2.state_dict())


class ReferenceViT(nn.Module):
    """A ViT whose encoder is ``nn.TransformerEncoder``, with the weights of a vitbook model.

    Shapes:
        forward: (B, C, H, W) -> (B, num_classes); forward_features: (B, C, H, W) -> (B, N, D).

    Raises:
        ValueError: a vitbook model that the reference cannot mirror (no class token, mean
            pooling, other position embeddings, no qkv bias, dropout).
    """

    def __init__(self, vit: VisionTransformer) -> None:
        super().__init__()
        cfg = vit.config
        mirrored = (
            cfg.class_token
            and cfg.pool == "cls"
            and cfg.pos_embed == "learned"
            and cfg.qkv_bias
            and cfg.drop_rate == cfg.attn_drop_rate == 0.0
        )
        if not mirrored:
            raise ValueError(
                "the reference mirrors the paper's ViT only: class_token=True, pool='cls', "
                "pos_embed='learned', qkv_bias=True and no dropout; got "
                f"{cfg}."
            )
        self.patch_embed = copy.deepcopy(vit.patch_embed)
        self.cls_token = copy.deepcopy(vit.cls_token)
        self.pos_embed = copy.deepcopy(vit.pos_embed)
        layer = nn.TransformerEncoderLayer(
            cfg.embed_dim,
            cfg.num_heads,
            dim_feedforward=cfg.mlp_hidden_dim,
            dropout=0.0,
            activation="gelu",
            layer_norm_eps=cfg.norm_eps,
            batch_first=True,
            norm_first=True,
        )
        self.encoder = nn.TransformerEncoder(
            layer, cfg.depth, norm=copy.deepcopy(vit.norm), enable_nested_tensor=False
        )
        for block, encoder_layer in zip(vit.blocks, self.encoder.layers, strict=True):
            copy_block_weights(block, encoder_layer)
        self.head = copy.deepcopy(vit.head)
        self.train(vit.training)

    def forward_features(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(images)  # (B, Gh * Gw, D)
        cls = self.cls_token.expand(x.shape[0], -1, -1)  # (B, 1, D)
        x = torch.cat([cls, x], dim=1) + self.pos_embed  # (B, N, D)
        return self.encoder(x)  # (B, N, D), after the final LayerNorm

    def forward_head(self, features: torch.Tensor) -> torch.Tensor:
        return self.head(features[:, 0])  # the class token's final state: (B, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(images))


def check_equal(vit: VisionTransformer, reference: ReferenceViT, images: torch.Tensor) -> float:
    """Assert that vitbook and the reference compute the same features and logits.

    Checked twice: in eval mode under ``torch.inference_mode()`` (the reference's fused fast
    path) and in training mode with autograd on (its regular path). Both models are left in eval
    mode.

    Returns:
        The largest absolute difference seen, in logits or features.

    Raises:
        AssertionError: the outputs differ by more than :data:`TOLERANCE`.
    """
    worst = 0.0
    for training in (False, True):
        vit.train(training)
        reference.train(training)
        context = torch.enable_grad() if training else torch.inference_mode()
        with context:
            features = (vit.forward_features(images), reference.forward_features(images))
            logits = (vit.forward_head(features[0]), reference.forward_head(features[1]))
        for ours, theirs in (features, logits):
            torch.testing.assert_close(ours, theirs, **TOLERANCE)
            worst = max(worst, (ours - theirs).abs().max().item())
    vit.eval()
    reference.eval()
    return worst


def takes_fast_path(reference: ReferenceViT, images: torch.Tensor) -> bool:
    """Whether the reference's eval-mode inference runs PyTorch's fused encoder-layer kernel."""
    reference.eval()
    with torch.inference_mode(), torch.profiler.profile() as prof:
        reference(images)
    return any(event.name == FAST_PATH_OP for event in prof.events())
