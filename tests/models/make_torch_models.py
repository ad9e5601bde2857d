#!/usr/bin/env python3
"""Writes the small PyTorch-made test models of tests/models/, through litert-torch's ``convert``.

- ``torch_mobilenet_v3_small``: torchvision's MobileNetV3-Small (width 0.25, reduced tail, 10
  classes) on a 1x3x64x64 image (NCHW, as PyTorch has it); random weights and BatchNorm statistics.
- ``torch_transformer``: a decoder-style language model written here: token ids (int32, 16
  tokens), an embedding, 2 blocks of RMSNorm, causal multi-head attention
  (``scaled_dot_product_attention``), LayerNorm and a GELU MLP, then logits over the vocabulary.
- ``torch_composites``: the same kind of model with its norms and attention marked as litert-torch's
  generative layers mark them (``odml.rms_norm``, ``odml.group_norm``,
  ``odml.scaled_dot_product_attention``): STABLEHLO_COMPOSITE nodes whose decomposition
  subgraphs TFLite runs.
- ``torch_composites_mixed``: other composites on other shapes: grouped-query attention (4 query
  heads on 2 key / value heads) over 10 tokens, LayerNorm on 40 channels, a composite of a name of
  its own with two results of different shapes (``example.gated``), and one whose decomposition
  holds an op the delegate does not run (``example.running_sum``, a CUMSUM).
- ``torch_vit_fused_qkv``: a ViT whose attention is timm's (one projection to q, k and v, split by
  a rank-5 permute), 8x8 patches of a 1x3x32x32 image (NCHW), hidden 48, 4 heads, 2 blocks.

Run with the torch venv's Python:

    TORCH_VENV/bin/python tests/models/make_torch_models.py [--out DIR] [--only NAME ...]

Seeded: the same torch / torchvision / litert-torch versions give the same models.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import litert_torch
import torch
import torchvision
from litert_torch.backend.composite.stablehlo_composite_builder import StableHLOCompositeBuilder
from litert_torch.generative.layers import normalization
from litert_torch.generative.layers import scaled_dot_product_attention as sdpa
from torch import nn
from torch.nn import functional as F

HERE = Path(__file__).resolve().parent


def mobilenet_v3_small() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    model = torchvision.models.mobilenet_v3_small(weights=None, width_mult=0.25, reduced_tail=True, num_classes=10)
    # BatchNorm's initial statistics (mean 0, variance 1) would fold to identities: random ones
    # give the folded convolutions weights of the size a trained model has
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.uniform_(-0.1, 0.1)
            module.running_var.uniform_(0.5, 1.5)
    return model, (torch.rand(1, 3, 64, 64),)


class RMSNorm(nn.Module):
    def __init__(self, width: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width) + 0.1 * torch.randn(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(nn.Module):
    """RMSNorm before the causal attention, LayerNorm before the GELU MLP (both kinds of norm in one model)."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = RMSNorm(width), nn.LayerNorm(width)
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(c, dim=-1)
        q, k, v = (y.view(b, t, self.heads, c // self.heads).transpose(1, 2) for y in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(attended.transpose(1, 2).reshape(b, t, c))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class TinyTransformer(nn.Module):
    def __init__(self, vocab: int = 128, width: int = 32, heads: int = 4, blocks: int = 2, tokens: int = 16) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Parameter(0.02 * torch.randn(1, tokens, width))
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(blocks))
        self.norm = RMSNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids) + self.position
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def transformer() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    return TinyTransformer(), (torch.randint(0, 128, (1, 16), dtype=torch.int32),)


class CompositeRMSNorm(RMSNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return normalization.rms_norm_with_hlfb(x, self.weight, self.eps, torch.ones(1))


class CompositeLayerNorm(nn.LayerNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return normalization.layer_norm_with_hlfb(x, list(self.normalized_shape), self.weight, self.bias, self.eps)


class CompositeBlock(Block):
    """Block's layers, its norms and attention marked as composites."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__(width, heads)
        self.norm1, self.norm2 = CompositeRMSNorm(width), CompositeLayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        head = c // self.heads
        q, k, v = self.qkv(self.norm1(x)).split(c, dim=-1)
        q, k, v = (y.view(b, t, self.heads, head) for y in (q, k, v))
        causal = torch.triu(torch.full((t, t), float("-inf")), diagonal=1).view(1, 1, t, t)
        attended = sdpa.scaled_dot_product_attention_with_hlfb(q, k, v, head, mask=causal)
        x = x + self.out(attended.reshape(b, t, c))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


def composites() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    model = TinyTransformer(vocab=96, width=24, heads=3, blocks=2, tokens=12)
    model.blocks = nn.ModuleList(CompositeBlock(24, 3) for _ in range(2))
    model.norm = CompositeRMSNorm(24)
    return model, (torch.randint(0, 96, (1, 12), dtype=torch.int32),)


class Mixed(nn.Module):
    """Composites the first model does not have, on shapes of their own."""

    def __init__(self, width: int = 40, heads: int = 4, kv_heads: int = 2, tokens: int = 10) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head = heads, kv_heads, width // heads
        self.q = nn.Linear(width, width)
        self.kv = nn.Linear(width, 2 * kv_heads * self.head)
        self.norm = CompositeLayerNorm(width)
        self.up = nn.Linear(width, 2 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q = self.q(x).view(b, t, self.heads, self.head)
        k, v = (y.reshape(b, t, self.kv_heads, self.head) for y in self.kv(x).split(self.kv_heads * self.head, -1))
        mask = torch.zeros(1, 1, t, t)
        x = x + sdpa.scaled_dot_product_attention_with_hlfb(q, k, v, self.head, mask=mask).reshape(b, t, c)
        gated, total = _gated(self.up(self.norm(x)))
        return self.out(gated) + total + _running_sum(x)


def _gated(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    builder = StableHLOCompositeBuilder(name="example.gated", attr={"axis": -1})
    x = builder.mark_inputs(x)
    a, g = x.chunk(2, dim=-1)
    gated = a * torch.sigmoid(g)
    return builder.mark_outputs(gated, gated.sum(-1, keepdim=True))


def _running_sum(x: torch.Tensor) -> torch.Tensor:
    builder = StableHLOCompositeBuilder(name="example.running_sum")
    x = builder.mark_inputs(x)
    return builder.mark_outputs(torch.cumsum(x, dim=1))


def mixed() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    return Mixed(), (torch.randn(1, 10, 40),)


class FusedQkvAttention(nn.Module):
    """timm's ViT attention: one projection to q, k and v, split by a rank-5 permute."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads, self.norm = heads, nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(
            nn.LayerNorm(width), nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(self.norm(x)).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        scores = (q @ k.transpose(-2, -1)) * (c // self.heads) ** -0.5
        x = x + self.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, c))
        return x + self.mlp(x)


class TimmVit(nn.Module):
    def __init__(self, width: int = 48, heads: int = 4, blocks: int = 2, patch: int = 8, image: int = 32) -> None:
        super().__init__()
        self.embed = nn.Conv2d(3, width, patch, stride=patch)
        self.cls = nn.Parameter(0.02 * torch.randn(1, 1, width))
        self.position = nn.Parameter(0.02 * torch.randn(1, (image // patch) ** 2 + 1, width))
        self.blocks = nn.Sequential(*(FusedQkvAttention(width, heads) for _ in range(blocks)))
        self.head = nn.Linear(width, 10)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.embed(image).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.position
        return self.head(self.blocks(x)[:, 0])


def timm_vit() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    return TimmVit(), (torch.rand(1, 3, 32, 32),)


#: file stem -> its module and sample inputs
MODELS: dict[str, Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]] = {
    "torch_mobilenet_v3_small": mobilenet_v3_small,
    "torch_transformer": transformer,
    "torch_composites": composites,
    "torch_composites_mixed": mixed,
    "torch_vit_fused_qkv": timm_vit,
}


def versions() -> dict[str, str]:
    return {
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "litert-torch": litert_torch.__version__,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder written (default: this one)")
    parser.add_argument("--only", nargs="*", choices=sorted(MODELS), help="these models only")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    print(" ".join(f"{k} {v}" for k, v in versions().items()), file=sys.stderr)
    for name in args.only or MODELS:
        torch.manual_seed(sum(name.encode()))  # one seed per model, whichever others are built
        with torch.no_grad():
            model, sample = MODELS[name]()
            path = args.out / f"{name}.tflite"
            litert_torch.convert(model.eval(), sample).export(str(path))
        print(f"{path.name}: {path.stat().st_size / 1024:.1f} KiB", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
