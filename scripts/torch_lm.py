#!/usr/bin/python3
"""tfm's PyTorch reference: the model and training loop of docs/architecture.md in plain PyTorch.

It reads the same JSON config as `tfm train`, builds the same Transformer language model, trains it
with the same optimizer, schedule, clipping and batches, and prints one JSON line (timings, last
training loss, validation loss), so tfm can be checked against it number for number and timed
against it second for second. Imported as a module it gives the model to scripts/dev/make_fixtures.py
(LM, model_config, sinusoidal, load_safetensors, save_safetensors).

Config keys read (all optional except data.path; defaults in brackets):
  seed [1337]
  data.path, data.val_fraction [0.1]           char vocabulary = sorted distinct characters of the file;
                                               the first floor(N * (1 - val_fraction)) tokens train
  model.d_model [128] n_layers [4] n_heads [4] n_kv_heads [n_heads] d_ff [4 d_model] max_seq_len [64]
        dropout [0] attention_dropout [0] activation [gelu|relu|swiglu] norm_position [pre|post]
        positional_encoding [sinusoidal|learned|rope] rope_theta [10000] norm [layernorm|rmsnorm]
        norm_eps [1e-5] qk_norm [false] causal [true] tie_embeddings [true] bias [true]
        zero_init [false] logit_softcap [0] x0_skip [false] value_residual [false] bigram_buckets [0]
        mtp_heads [0]
  train.objective [causal_lm|masked_lm] mask_prob [0.15] batch_size [12] seq_len [max_seq_len]
        max_steps [2000] grad_clip [1.0] eval_interval [250] eval_steps [20]
  train.optimizer.name [adamw|muon] lr [1e-3] betas [[0.9, 0.99]] weight_decay [0.1]
        muon_lr [0.02] muon_momentum [0.95] muon_weight_decay [0] muon_cautious_weight_decay [false]
        muon_momentum_warmup_steps [0] muon_momentum_cooldown_steps [0] muon_momentum_min [0.85]
  train.ema_decay [0]                          evaluations read an EMA of the weights
  train.mtp_weight [0.3]                       model.mtp_heads > 0: the extra heads' loss weight at step 0,
                                               linearly down to 0 at max_steps (logged loss: next token only)
  train.lr_schedule.name [cosine|wsd|constant|inverse_sqrt] warmup_steps [100] min_lr [lr / 10]
        decay_fraction [0.2, wsd]
Keys of tfm's that change the model or the loss but are not implemented here (seq2seq, BPE, additive
scores, head gating and mixing, gradient accumulation) are refused rather than ignored; the keys they
gate are listed as such (a test holds the lists to tfm's model keys).

Output: one JSON line {"impl": "torch", ..., "steps", "ms_per_step_median", "tokens_per_s",
"train_seconds", "last_train_loss", "val_loss"}; with --target-loss also one line per evaluation.

Examples (from the repository root; the script runs /usr/bin/python3, where Debian keeps PyTorch):
  scripts/torch_lm.py --config configs/shakespeare_char.json --steps 200 --threads 2
  scripts/torch_lm.py --config configs/shakespeare_mlm.json --bf16          # bfloat16 autocast
  scripts/torch_lm.py --config configs/tiny.json --print-names              # export names and shapes
  scripts/torch_lm.py --config RUN/config.json --load-safetensors RUN/model.safetensors \\
      --check-logits logits.json                                           # an export's logits
  scripts/torch_lm.py --config configs/shakespeare_char.json --target-loss 2.0   # time to quality
  scripts/torch_lm.py --config C --init-safetensors w0.safetensors --batches b.json \\
      --save-safetensors w1.safetensors --log-steps                       # optimizer-parity fixtures

Needs python3-torch and python3-numpy (Debian 12: PyTorch 1.13). For a seed and config the numbers are
fixed: the model draws its initial weights, then the batches, from torch's generator in a fixed order
(keep that order when editing, or every published figure moves).
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# Legend: B batch, T time, C d_model, H query heads, Hkv key/value heads, Dk = C / H, V vocabulary.

MODEL_DEFAULTS = dict(d_model=128, n_layers=4, n_heads=4, n_kv_heads=None, d_ff=None, max_seq_len=64,
                      dropout=0.0, attention_dropout=0.0, activation="gelu", norm_position="pre",
                      positional_encoding="sinusoidal", causal=True, tie_embeddings=True, bias=True,
                      norm="layernorm", norm_eps=1e-5, rope_theta=10000.0, qk_norm=False,
                      zero_init=False, logit_softcap=0.0, x0_skip=False, value_residual=False, bigram_buckets=0,
                      mtp_heads=0)

# tfm keys this reference does not implement, with the value that means "off": any other value is refused.
NOT_HERE = {"model.attention_score": "dot", "model.head_gating": "none", "model.head_mixing": "none",
            "data.tokenizer": "char", "data.format": "text"}
NOT_HERE_TRAINING = {"train.grad_accum_steps": 1}
# tfm keys read only under a key refused above: ignored here because they change nothing while it is off.
READ_ONLY_WITH = {"model.head_topk": "model.head_gating", "model.head_balance_loss": "model.head_gating",
                  "model.head_groups": "model.head_mixing", "model.n_encoder_layers": "train.objective seq2seq",
                  "model.n_decoder_layers": "train.objective seq2seq"}


def setting(cfg, dotted, default):
    """cfg["a"]["b"]["c"] for "a.b.c", or default when any level is missing."""
    node = cfg
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return node


def model_config(cfg):
    """The model section with every default filled in (n_kv_heads = n_heads, d_ff = 4 C when unset)."""
    m = {key: setting(cfg, "model." + key, default) for key, default in MODEL_DEFAULTS.items()}
    m["n_kv_heads"] = m["n_kv_heads"] or m["n_heads"]
    m["d_ff"] = m["d_ff"] or 4 * m["d_model"]
    return m


# ---- layers ----

class RMSNorm(nn.Module):
    """Zhang & Sennrich 2019, "Root Mean Square Layer Normalization", sec. 3: x / sqrt(mean(x^2) + eps) * g.
    No centring and no bias; the gain g starts at 1."""

    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def make_norm(m, dim):
    """model.norm: LayerNorm (Ba et al. 2016, as in Vaswani et al. 2017 sec. 3.1) or RMSNorm, eps model.norm_eps."""
    if m["norm"] == "rmsnorm":
        return RMSNorm(dim, m["norm_eps"])
    return nn.LayerNorm(dim, eps=m["norm_eps"])


def sinusoidal(T, d):
    """Vaswani et al. 2017 sec. 3.5 (d2l.ai, "Self-Attention and Positional Encoding"): (T, d) float32 table
    P[t, 2j] = sin(t / 10000^(2j/d)), P[t, 2j+1] = cos(t / 10000^(2j/d)), computed in float64."""
    t = torch.arange(T, dtype=torch.float64)[:, None]
    two_j = torch.arange(0, d, 2, dtype=torch.float64)
    angle = t / torch.pow(10000.0, two_j / d)  # (T, ceil(d/2))
    table = torch.zeros(T, d, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, : d // 2])  # an odd d has one cosine column fewer
    return table.float()


def rope(x, theta):
    """Rotary position embedding (Su et al. 2021, RoFormer, sec. 3.2-3.4) on x (B, H, T, Dk): at position t,
    the adjacent pair of dims (2i, 2i+1) turns by the angle t * theta^(-2i/Dk). Adjacent pairs are the
    paper's (and Meta's original Llama, llama.cpp's `llama` architecture) layout, not "rotate half"."""
    T, dk = x.shape[-2], x.shape[-1]
    freq = torch.pow(float(theta), -torch.arange(0, dk, 2, dtype=torch.float64) / dk)  # (Dk/2)
    angle = torch.arange(T, dtype=torch.float64)[:, None] * freq[None, :]               # (T, Dk/2)
    cos, sin = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


class Attention(nn.Module):
    """Multi-head scaled dot-product self-attention (Vaswani et al. 2017 sec. 3.2; d2l.ai "Multi-Head
    Attention"), with grouped-query K/V (Ainslie et al. 2023; Hkv = 1 is Shazeer 2019's multi-query),
    optional QK-norm and RoPE. Parameter names: wq, wk, wv, wo (weights (out, in)), q_norm, k_norm."""

    def __init__(self, m, later_layer=False):
        super().__init__()
        d, h, hkv = m["d_model"], m["n_heads"], m["n_kv_heads"]
        assert d % h == 0 and h % hkv == 0, "n_heads must divide d_model and n_kv_heads divide n_heads"
        self.h, self.hkv, self.dk, self.causal = h, hkv, d // h, m["causal"]
        self.rope_theta = m["rope_theta"] if m["positional_encoding"] == "rope" else None
        # QK-norm (Henry et al. 2020; Dehghani et al. 2023): RMSNorm of each head's Dk entries of
        # Q and of K, one gain of size Dk each, shared by the heads. Registered first: its names come first.
        self.q_norm = RMSNorm(self.dk, m["norm_eps"]) if m["qk_norm"] else None
        self.k_norm = RMSNorm(self.dk, m["norm_eps"]) if m["qk_norm"] else None
        self.wq = nn.Linear(d, h * self.dk, bias=m["bias"])
        self.wk = nn.Linear(d, hkv * self.dk, bias=m["bias"])
        self.wv = nn.Linear(d, hkv * self.dk, bias=m["bias"])
        self.wo = nn.Linear(h * self.dk, d, bias=m["bias"])
        self.drop = nn.Dropout(m["attention_dropout"])
        # Value residual (Zhou et al. 2024, "Value Residual Learning"): a later layer attends to
        # lambda V + (1 - lambda) V_1, V_1 the first layer's values; lambda starts at 0.5.
        self.value_lambda = nn.Parameter(torch.full((1,), 0.5)) if later_layer else None

    def forward(self, x, first_values=None):
        """x (B, T, C) -> (B, T, C) and the values (B, T, Hkv*Dk) the layer attended to."""
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.h, self.dk).transpose(1, 2)    # (B, H, T, Dk)
        k = self.wk(x).view(B, T, self.hkv, self.dk).transpose(1, 2)  # (B, Hkv, T, Dk)
        values = self.wv(x)  # (B, T, Hkv*Dk)
        if self.value_lambda is not None:
            values = self.value_lambda * values + (1 - self.value_lambda) * first_values
        v = values.view(B, T, self.hkv, self.dk).transpose(1, 2)      # (B, Hkv, T, Dk)
        if self.q_norm is not None:  # before the rotation
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rope_theta is not None:
            q, k = rope(q, self.rope_theta), rope(k, self.rope_theta)
        if self.hkv != self.h:  # query head i reads key/value head i // (H / Hkv)
            k = k.repeat_interleave(self.h // self.hkv, dim=1)
            v = v.repeat_interleave(self.h // self.hkv, dim=1)
        s = q @ k.transpose(-2, -1) / math.sqrt(self.dk)  # (B, H, T, T), Vaswani et al. eq. 1
        if self.causal:  # a position sees itself and the past only
            s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        p = self.drop(torch.softmax(s, dim=-1))
        o = (p @ v).transpose(1, 2).reshape(B, T, self.h * self.dk)  # heads concatenated (B, T, C)
        return self.wo(o), values


class Block(nn.Module):
    """One Transformer block (d2l.ai "Transformer", "The Encoder"/"The Decoder"): attention and the
    position-wise feed-forward network, each a residual branch. Pre-norm normalises the branch input
    (Xiong et al. 2020); post-norm the sum, as Vaswani et al. 2017 (d2l's AddNorm)."""

    def __init__(self, m, layer=0):
        super().__init__()
        d, bias = m["d_model"], m["bias"]
        self.pre = m["norm_position"] == "pre"
        # Creation order fixes both the export-name order and the random draws nn.Linear makes.
        self.ln1, self.ln2 = make_norm(m, d), make_norm(m, d)
        self.attn = Attention(m, later_layer=m["value_residual"] and layer > 0)
        self.fc1 = nn.Linear(d, m["d_ff"], bias=bias)
        self.fc2 = nn.Linear(m["d_ff"], d, bias=bias)
        self.swiglu = m["activation"] == "swiglu"
        # SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer", sec. 2): fc1 is the gate W, fc3 the up V.
        self.fc3 = nn.Linear(d, m["d_ff"], bias=bias) if self.swiglu else None
        if m["activation"] not in ("gelu", "relu", "swiglu"):
            raise ValueError("model.activation: expected gelu, relu or swiglu, got %r" % m["activation"])
        self.act = F.relu if m["activation"] == "relu" else F.gelu  # exact (erf) GELU, Hendrycks & Gimpel 2016
        self.drop = nn.Dropout(m["dropout"])
        # The x0 skip: the block's input becomes a x + b x0, x0 the embedding output, (a, b) from (1, 0).
        self.x0_mix = nn.Parameter(torch.tensor([1.0, 0.0])) if m["x0_skip"] else None

    def ffn(self, x):
        """Vaswani et al. 2017 eq. 2 with act = GELU or ReLU: fc2(act(fc1 x)); SwiGLU: fc2(silu(fc1 x) * fc3 x)."""
        if self.swiglu:
            return self.fc2(F.silu(self.fc1(x)) * self.fc3(x))
        return self.fc2(self.act(self.fc1(x)))

    def forward(self, x, x0=None, first_values=None):
        """x (B, T, C) -> (B, T, C) and the values its attention attended to (the value residual's V_1)."""
        if self.x0_mix is not None:
            x = x * self.x0_mix[0:1] + x0 * self.x0_mix[1:2]
        if self.pre:
            a, values = self.attn(self.ln1(x), first_values)
            x = x + self.drop(a)
            return x + self.drop(self.ffn(self.ln2(x))), values
        a, values = self.attn(x, first_values)
        x = self.ln1(x + self.drop(a))
        return self.ln2(x + self.drop(self.ffn(x))), values


class MtpBranch(nn.Module):
    """One extra head of multi-token prediction (Gloeckle et al. 2024; DeepSeek-V3 2024 sec. 2.2): a pre-norm
    residual branch with one linear map, z = x + W norm(x), W (C, C) without bias, x the last block's output;
    the shared final norm and output head turn z into the logits of token t+1+k."""

    def __init__(self, m):
        super().__init__()
        self.norm = make_norm(m, m["d_model"])
        self.proj = nn.Linear(m["d_model"], m["d_model"], bias=False)

    def forward(self, x):  # (B, T, C)
        return x + self.proj(self.norm(x))


def mtp_loss(extra, y):
    """Multi-token prediction's loss: the mean over k = 1..K of head k's mean cross-entropy over the positions
    t < T - k, whose target is y[:, t + k] (token t+1+k); the last k positions of each row have none."""
    T = y.shape[1]
    losses = [F.cross_entropy(z[:, :T - k].reshape(-1, z.shape[-1]).float(), y[:, k:].reshape(-1))
              for k, z in enumerate(extra, start=1)]
    return sum(losses) / len(losses)


def mtp_weight_at(weight, step, total):
    """train.mtp_weight at step 0 (0-based), linearly down to 0 at step total (train.max_steps)."""
    return weight * (1.0 - min(max(step, 0), total) / total)


class LM(nn.Module):
    """The language model: embedding (+ positions), n_layers blocks, final norm (pre-norm), output head
    tied to the embedding (Press & Wolf 2017; Vaswani et al. 2017 sec. 3.4) or its own matrix.
    LM(model_config(cfg), V); forward(idx (B, T) int64) -> logits (B, T, V); with extra_heads=True and
    model.mtp_heads K, (logits, [K extra heads' logits (B, T, V)])."""

    def __init__(self, m, vocab):
        super().__init__()
        d = m["d_model"]
        self.m = m
        self.emb = nn.Embedding(vocab, d)
        self.positions = m["positional_encoding"]
        if self.positions not in ("sinusoidal", "learned", "rope"):
            raise ValueError("model.positional_encoding: expected sinusoidal, learned or rope, got %r" % self.positions)
        if self.positions == "sinusoidal":
            self.register_buffer("pe", sinusoidal(m["max_seq_len"], d), persistent=False)
        elif self.positions == "learned":
            self.pos = nn.Embedding(m["max_seq_len"], d)
        self.drop = nn.Dropout(m["dropout"])
        self.blocks = nn.ModuleList(Block(m, layer) for layer in range(m["n_layers"]))
        self.ln_f = make_norm(m, d) if m["norm_position"] == "pre" else nn.Identity()
        self.head = None if m["tie_embeddings"] else nn.Linear(d, vocab, bias=False)
        if m["zero_init"] and m["tie_embeddings"]:
            raise ValueError("model.zero_init: needs model.tie_embeddings = false")
        self.vocab = vocab
        # The bigram embedding: row (prev * V + token) mod N of a zero-initialised (N, C) table is added to
        # the embedding output of every position that has a token before it.
        self.bigram = nn.Embedding(m["bigram_buckets"], d) if m["bigram_buckets"] > 0 else None
        # Multi-token prediction: mtp.k (k = 1..K) predicts token t+1+k, training only.
        self.mtp = nn.ModuleDict((str(k), MtpBranch(m)) for k in range(1, m["mtp_heads"] + 1))
        self.reset_parameters()

    def reset_parameters(self):
        """GPT's init (Radford et al. 2018 sec. 4.1; 2019 sec. 2.3): matrices and embeddings N(0, 0.02), the residual
        projections wo and fc2 N(0, 0.02 / sqrt(2 n_layers)); norm gains 1; biases 0. (SwiGLU's fc3 is
        drawn like fc1.) Drawn in parameter order, after the default draws nn.Linear/nn.Embedding made."""
        residual_std = 0.02 / math.sqrt(2 * self.m["n_layers"])
        for name, p in self.named_parameters():
            if name.endswith(("x0_mix", "value_lambda")):  # the tricks' scalars keep their own start
                continue
            if p.dim() == 2:
                std = residual_std if name.endswith(("attn.wo.weight", "fc2.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("weight"):  # the 1-D weights are the norms' gains
                nn.init.ones_(p)
            else:
                nn.init.zeros_(p)
        # Zeroed after the draws, so the other weights are the same with a trick on or off.
        with torch.no_grad():
            for name, p in self.named_parameters():
                zero_init = self.m["zero_init"] and (name.endswith(("attn.wo.weight", "fc2.weight", "head.weight"))
                                                     or (name.startswith("mtp.") and name.endswith(".proj.weight")))
                if zero_init or name == "bigram.weight":
                    p.zero_()

    def forward(self, idx, extra_heads=False):
        T = idx.shape[1]
        x = self.emb(idx)  # (B, T, C)
        if self.positions == "sinusoidal":  # Vaswani et al. 2017 sec. 3.4: embeddings scaled by sqrt(C)
            x = x * math.sqrt(self.m["d_model"]) + self.pe[:T]
        elif self.positions == "learned":
            x = x + self.pos(torch.arange(T))
        # rope: no table; positions enter inside every attention layer
        x = self.drop(x)
        if self.bigram is not None:  # positions 1.. of each sequence: the pair (idx[t-1], idx[t])
            rows = (idx[:, :-1] * self.vocab + idx[:, 1:]) % self.m["bigram_buckets"]  # (B, T-1)
            x = torch.cat((x[:, :1], x[:, 1:] + self.bigram(rows)), dim=1)
        x0, first_values = x, None
        for block in self.blocks:
            x, values = block(x, x0, first_values)
            first_values = values if first_values is None else first_values
        logits = self.logits(x)
        if not extra_heads:
            return logits
        return logits, [self.logits(branch(x)) for branch in self.mtp.values()]

    def logits(self, x):
        """The final norm and the output head, soft-capped: (B, T, C) -> (B, T, V)."""
        x = self.ln_f(x)
        logits = x @ self.emb.weight.t() if self.head is None else self.head(x)  # (B, T, V)
        c = self.m["logit_softcap"]
        return c * torch.tanh(logits / c) if c > 0 else logits


# ---- optimisation ----

def lr_at(step, lr, min_lr, warmup, total, schedule, decay_fraction=0.2):
    """The learning rate of step (0-based). Linear warmup lr * (step + 1) / warmup, then
    cosine: from lr to min_lr at step total (Loshchilov & Hutter 2017, SGDR, without restarts);
    wsd: lr, then linear to min_lr over the last decay_fraction of total (Hu et al. 2024, MiniCPM, sec. 4);
    constant: lr; inverse_sqrt: lr * sqrt(warmup / (step + 1)) (Vaswani et al. 2017 sec. 5.3)."""
    if step < warmup:
        return lr * (step + 1) / warmup
    if schedule == "wsd":
        decay_start = total - int(decay_fraction * total)
        if step < decay_start:
            return lr
        return lr + (min_lr - lr) * min(1.0, (step - decay_start + 1) / max(1, total - decay_start))
    if schedule == "constant":
        return lr
    if schedule == "inverse_sqrt":
        return lr * math.sqrt(max(warmup, 1) / (step + 1))
    if step >= total:
        return min_lr
    progress = (step - warmup) / max(1, total - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - min_lr)


SCHEDULES = ("cosine", "wsd", "constant", "inverse_sqrt")


def newton_schulz5(G, steps=5, eps=1e-7):
    """Muon's orthogonalisation (Jordan et al. 2024, "Muon: An optimizer for hidden layers"): scale G to
    Frobenius norm <= 1, then `steps` quintic Newton-Schulz iterations X <- a X + (b A + c A^2) X, A = X X^T,
    (a, b, c) = (3.4445, -4.7750, 2.0315), which push every singular value towards 1 (roughly U V^T of
    G's SVD). Wide orientation (rows <= columns) so A is the small Gram matrix; float32 here."""
    a, b, c = 3.4445, -4.7750, 2.0315
    X = G.float() / (G.norm() + eps)
    tall = X.size(0) > X.size(1)
    if tall:
        X = X.T
    for _ in range(steps):
        A = X @ X.T
        X = a * X + (b * A + c * A @ A) @ X
    return X.T if tall else X


class Muon(torch.optim.Optimizer):
    """Muon (Jordan et al. 2024) for weight matrices (out, in), per step:
    M = mu M + G;  U = G + mu M (Nesterov);  W -= lr wd W;  W -= lr sqrt(max(1, out/in)) NS5(U).
    cautious: the decay only where NS5(U) W >= 0, the sign read before it (Chen et al. 2025, "Cautious
    Weight Decay")."""

    def __init__(self, params, lr, momentum, weight_decay, cautious=False):
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, cautious=cautious))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            lr, mu, wd = group["lr"], group["momentum"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                momentum = self.state[p].setdefault("m", torch.zeros_like(p))
                momentum.mul_(mu).add_(p.grad)
                update = p.grad + mu * momentum
                if group["cautious"]:
                    o = newton_schulz5(update)
                    p.mul_(torch.where(o * p >= 0, torch.tensor(1 - lr * wd), torch.tensor(1.0)))
                    p.add_(o, alpha=-lr * max(1.0, p.size(0) / p.size(1)) ** 0.5)
                    continue
                p.mul_(1 - lr * wd)
                p.add_(newton_schulz5(update), alpha=-lr * max(1.0, p.size(0) / p.size(1)) ** 0.5)


def muon_momentum_at(cfg, step, total):
    """Muon's momentum at step (0-based) of total (modded-nanogpt's schedule): from muon_momentum_min up to
    muon_momentum over the first muon_momentum_warmup_steps, back down over the last
    muon_momentum_cooldown_steps; exactly muon_momentum when both are 0."""
    final = setting(cfg, "train.optimizer.muon_momentum", 0.95)
    warmup = setting(cfg, "train.optimizer.muon_momentum_warmup_steps", 0)
    cooldown = setting(cfg, "train.optimizer.muon_momentum_cooldown_steps", 0)
    if warmup <= 0 and cooldown <= 0:
        return final
    lo = setting(cfg, "train.optimizer.muon_momentum_min", 0.85)
    w = min(1.0, step / warmup) if warmup > 0 else 1.0
    c = min(1.0, max(0.0, (step - (total - cooldown) + 1.0) / cooldown)) if cooldown > 0 else 0.0
    return lo + (final - lo) * w * (1.0 - c)


def set_muon_momentum(optimizers, cfg, step, total):
    for opt, _ in optimizers:
        if isinstance(opt, Muon):
            for group in opt.param_groups:
                group["momentum"] = muon_momentum_at(cfg, step, total)


class WeightEma:
    """train.ema_decay d: E = W at the start; after every step E = d E + (1 - d) W. swapped() puts E in
    the model for an evaluation and the raw weights back after."""

    def __init__(self, model, decay):
        self.decay = decay
        self.shadow = {n: p.detach().clone() for n, p in model.named_parameters()}

    @torch.no_grad()
    def update(self, model):
        for n, p in model.named_parameters():
            self.shadow[n].mul_(self.decay).add_(p, alpha=1.0 - self.decay)

    @torch.no_grad()
    def swap(self, model):
        for n, p in model.named_parameters():
            raw = p.detach().clone()
            p.copy_(self.shadow[n])
            self.shadow[n] = raw


def make_ema(model, cfg):
    decay = setting(cfg, "train.ema_decay", 0.0)
    return WeightEma(model, decay) if decay > 0 else None


def make_optimizers(model, cfg):
    """AdamW (Loshchilov & Hutter 2019, decoupled decay) with weight decay on rank >= 2 tensors only, eps 1e-8.
    With optimizer "muon", the blocks' matrices (rank 2, under "blocks.") go to Muon instead.
    Returns [(optimizer, base lr)]: the schedule scales every base lr by the same factor."""
    name = setting(cfg, "train.optimizer.name", "adamw")
    if name not in ("adamw", "muon"):
        sys.exit("train.optimizer.name: %r is not implemented here (adamw, muon)" % name)
    lr = setting(cfg, "train.optimizer.lr", 1e-3)
    to_muon = lambda n, p: name == "muon" and p.dim() == 2 and n.startswith("blocks.")
    decayed = [p for n, p in model.named_parameters() if p.dim() >= 2 and not to_muon(n, p)]
    undecayed = [p for p in model.parameters() if p.dim() < 2]
    adamw = torch.optim.AdamW([{"params": decayed, "weight_decay": setting(cfg, "train.optimizer.weight_decay", 0.1)},
                               {"params": undecayed, "weight_decay": 0.0}],
                              lr=lr, betas=tuple(setting(cfg, "train.optimizer.betas", [0.9, 0.99])), eps=1e-8)
    optimizers = [(adamw, lr)]
    if name == "muon":
        muon_lr = setting(cfg, "train.optimizer.muon_lr", 0.02)
        muon = Muon([p for n, p in model.named_parameters() if to_muon(n, p)], lr=muon_lr,
                    momentum=setting(cfg, "train.optimizer.muon_momentum", 0.95),
                    weight_decay=setting(cfg, "train.optimizer.muon_weight_decay", 0.0),
                    cautious=setting(cfg, "train.optimizer.muon_cautious_weight_decay", False))
        optimizers.append((muon, muon_lr))
    return optimizers


# ---- safetensors (https://github.com/huggingface/safetensors: u64 LE header size, JSON header, raw data) ----

def load_safetensors(path):
    """{name: float32 tensor} of a safetensors file (F32 tensors only)."""
    with open(path, "rb") as f:
        (header_size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_size))
        data = f.read()
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise ValueError("%s: tensor %s is %s, only F32 is read" % (path, name, info["dtype"]))
        begin, end = info["data_offsets"]
        values = np.frombuffer(data[begin:end], dtype="<f4").copy()
        tensors[name] = torch.from_numpy(values).reshape(info["shape"])
    return tensors


def save_safetensors(path, tensors):
    """Writes {name: tensor} as float32 little-endian, in the given order; the header is padded with spaces
    so the data starts 8-byte aligned."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        blob = t.detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-(8 + len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def load_weights(model, path):
    """Copies a safetensors file into the model's parameters; every name must match (--print-names)."""
    tensors = load_safetensors(path)
    names = dict(model.named_parameters())
    missing = [n for n in names if n not in tensors]
    unexpected = [n for n in tensors if n not in names]
    wrong = ["%s %s != %s" % (n, list(t.shape), list(names[n].shape))
             for n, t in tensors.items() if n in names and t.shape != names[n].shape]
    if missing or unexpected or wrong:
        print(json.dumps({"impl": "torch", "error": "names differ", "missing": missing, "unexpected": unexpected,
                          "wrong_shape": wrong}))
        sys.exit(1)
    with torch.no_grad():
        for n, p in names.items():
            p.copy_(tensors[n])


# ---- the command ----

def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True, help="JSON config (as for tfm train)")
    ap.add_argument("--data", help="text file (default: the config's data.path, relative to the working dir)")
    ap.add_argument("--steps", type=int, help="train this many steps (the schedule still ends at train.max_steps)")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("TFM_THREADS", os.cpu_count())),
                    help="torch threads (default: $TFM_THREADS, else all cores)")
    ap.add_argument("--eval-steps", type=int,
                    help="validation batches (default train.eval_steps; 0 = the whole split, causal_lm)")
    ap.add_argument("--load-safetensors", metavar="FILE",
                    help="load these weights and do not train: with --check-logits compare logits, "
                         "else print the validation loss")
    ap.add_argument("--check-logits", metavar="JSON",
                    help='{"tokens": [[...]], "logits": [[[...]]]}: exit 1 when a logit differs by >= 1e-3')
    ap.add_argument("--print-names", action="store_true", help="print the parameters' export names and shapes")
    ap.add_argument("--bf16", action="store_true",
                    help="forward and loss under torch.autocast('cpu', torch.bfloat16); weights, "
                         "optimizer and loss stay float32")
    ap.add_argument("--target-loss", type=float,
                    help="time to quality: evaluate every train.eval_interval steps (train.eval_steps batches), "
                         "stop at the first val loss <= this and report the wall time, evaluation included")
    ap.add_argument("--max-seconds", type=float,
                    help="with --target-loss: give up at the first evaluation after this much training time and "
                         "report the val loss reached (a long baseline under a time limit)")
    ap.add_argument("--init-safetensors", metavar="FILE",
                    help="start training from these weights instead of the seed's initialisation "
                         "(the seed's draws are still made, so the batches do not move)")
    ap.add_argument("--batches", metavar="JSON",
                    help='train on these batches, {"x": [B x T ids per step, ...], "y": [...]} '
                         "(masked_lm: y is -100 where no loss is read); steps default to their number")
    ap.add_argument("--save-safetensors", metavar="FILE",
                    help="after training, write the weights (float32, names as --print-names)")
    ap.add_argument("--save-ema-safetensors", metavar="FILE",
                    help="with train.ema_decay: after training, write the EMA of the weights")
    ap.add_argument("--log-steps", action="store_true",
                    help='print {"step", "lr", "loss"} after every step (loss unrounded)')
    return ap.parse_args()


def refuse_unimplemented(cfg, training):
    table = dict(NOT_HERE, **(NOT_HERE_TRAINING if training else {}))
    for key, off in table.items():
        value = setting(cfg, key, off)
        if value != off:
            sys.exit("%s: %r is not implemented in torch_lm.py (only %r)" % (key, value, off))


def main():
    a = parse_args()
    cfg = json.load(open(a.config))
    torch.set_num_threads(a.threads)
    torch.manual_seed(setting(cfg, "seed", 1337))

    # Data: the char vocabulary; the first floor(N (1 - val_fraction)) tokens train, the rest validate.
    text = open(a.data or setting(cfg, "data.path", ""), encoding="utf-8").read()
    chars = sorted(set(text))
    index = {ch: i for i, ch in enumerate(chars)}
    tokens = torch.tensor([index[ch] for ch in text], dtype=torch.long)
    n_train = int(len(tokens) * (1.0 - setting(cfg, "data.val_fraction", 0.1)))
    train_tokens, val_tokens = tokens[:n_train], tokens[n_train:]

    objective = setting(cfg, "train.objective", "causal_lm")
    if objective not in ("causal_lm", "masked_lm"):
        sys.exit("train.objective: %r is not implemented here (causal_lm, masked_lm)" % objective)
    refuse_unimplemented(cfg, training=False)
    masked = objective == "masked_lm"
    m = model_config(cfg)
    V = len(chars) + (1 if masked else 0)  # masked_lm: [MASK] is the last id (Devlin et al. 2019)
    mask_id, mask_prob = len(chars), setting(cfg, "train.mask_prob", 0.15)
    if masked and m["mtp_heads"]:
        sys.exit("model.mtp_heads: multi-token prediction belongs to train.objective causal_lm")
    model = LM(m, V)  # the seed's first draws: the initial weights
    n_params = sum(p.numel() for p in model.parameters())

    if a.print_names:
        for name, p in model.named_parameters():
            print(name, list(p.shape))
        return

    B = setting(cfg, "train.batch_size", 12)
    T = setting(cfg, "train.seq_len", m["max_seq_len"])
    eval_steps = a.eval_steps if a.eval_steps is not None else setting(cfg, "train.eval_steps", 20)

    def random_batch(src):
        """B uniform windows t[i:i+T]; causal_lm targets t[i+1:i+T+1]. masked_lm (Devlin et al. 2019,
        sec. 3.1 "Task #1"): each position is chosen with mask_prob; a chosen input becomes [MASK] with
        probability 0.8, a uniform random character with 0.1, stays with 0.1; targets are the original
        tokens at chosen positions and -100 (no loss) elsewhere."""
        starts = torch.randint(len(src) - T - 1, (B,))
        x = torch.stack([src[i:i + T] for i in starts])
        if not masked:
            return x, torch.stack([src[i + 1:i + T + 1] for i in starts])
        chosen = torch.rand(B, T) < mask_prob
        u = torch.rand(B, T)
        y = torch.where(chosen, x, torch.full_like(x, -100))
        x = torch.where(chosen & (u < 0.8), torch.full_like(x, mask_id), x)
        x = torch.where(chosen & (u >= 0.8) & (u < 0.9), torch.randint(len(chars), (B, T)), x)
        return x, y

    def loss_of(x, y):
        """Mean cross-entropy over the positions with a target (all of them for causal_lm)."""
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            return F.cross_entropy(model(x).view(-1, V).float(), y.view(-1), ignore_index=-100)

    mtp_weight = setting(cfg, "train.mtp_weight", 0.3)

    def training_loss_of(x, y, step, total):
        """(what backward differentiates, the next-token loss to report): with model.mtp_heads, the
        next-token loss plus mtp_weight_at(step) times the extra heads' loss."""
        if not m["mtp_heads"]:
            loss = loss_of(x, y)
            return loss, loss
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            logits, extra = model(x, extra_heads=True)
            loss = F.cross_entropy(logits.view(-1, V).float(), y.view(-1))
            return loss + mtp_weight_at(mtp_weight, step, total) * mtp_loss(extra, y), loss

    ema = None  # train.ema_decay's WeightEma, made with the optimizers

    def evaluate(src):
        """Mean loss of eval_steps random batches, in eval mode (no dropout); the EMA's weights if any."""
        model.eval()
        if ema:
            ema.swap(model)
        with torch.no_grad():
            if eval_steps == 0:
                result = evaluate_whole(src)
            else:
                losses = [loss_of(x, y).item() for x, y in (random_batch(src) for _ in range(eval_steps))]
                result = sum(losses) / len(losses)
        if ema:
            ema.swap(model)
        model.train()
        return result

    def evaluate_whole(src):
        """train.eval_steps 0 (causal_lm): every token after the first a target once, in non-overlapping
        windows of T (B per forward), the tail (the last (n - 1) mod T targets) a shorter window."""
        if masked:
            sys.exit("train.eval_steps 0: the whole split is implemented here for causal_lm only")
        total, n = 0.0, len(src) - 1
        starts = list(range(0, n - T + 1, T))
        for i in range(0, len(starts), B):
            rows = starts[i:i + B]
            x = torch.stack([src[s:s + T] for s in rows])
            y = torch.stack([src[s + 1:s + T + 1] for s in rows])
            total += loss_of(x, y).item() * x.numel()
        tail = n % T
        if tail:
            s = n - tail
            total += loss_of(src[s:s + tail].view(1, -1), src[s + 1:s + tail + 1].view(1, -1)).item() * tail
        return total / n

    if a.load_safetensors:
        load_weights(model, a.load_safetensors)
        model.eval()
        if not a.check_logits:
            print(json.dumps({"impl": "torch", "objective": objective, "eval_steps": eval_steps,
                              "val_loss": round(evaluate(val_tokens), 4)}))
            return
        ref = json.load(open(a.check_logits))
        with torch.no_grad():
            logits = model(torch.tensor(ref["tokens"], dtype=torch.long))
        err = (logits - torch.tensor(ref["logits"])).abs().max().item()
        print(json.dumps({"impl": "torch", "max_abs_logit_diff": err}))
        sys.exit(0 if err < 1e-3 else 1)

    # Training.
    refuse_unimplemented(cfg, training=True)
    if masked == m["causal"]:
        sys.exit("train.objective %s needs model.causal %s" % (objective, "false" if masked else
                 "true (a bidirectional model trained on the next token reads the answer)"))
    if a.init_safetensors:
        load_weights(model, a.init_safetensors)
    given = None
    if a.batches:
        given = json.load(open(a.batches))
        if len(given["x"]) != len(given["y"]) or not given["x"]:
            sys.exit("--batches %s: expected as many x as y batches, at least one" % a.batches)
        given = [(torch.tensor(x, dtype=torch.long), torch.tensor(y, dtype=torch.long))
                 for x, y in zip(given["x"], given["y"])]
        B, T = given[0][0].shape
        for x, y in given:
            if x.dim() != 2 or x.shape != y.shape or x.shape[1] > m["max_seq_len"]:
                sys.exit("--batches %s: every x and y must be the same (B, T) with T <= model.max_seq_len"
                         % a.batches)
    steps = a.steps or (len(given) if given else setting(cfg, "train.max_steps", 2000))
    if given and steps > len(given):
        sys.exit("--steps %d: --batches %s holds %d batches" % (steps, a.batches, len(given)))
    total = setting(cfg, "train.max_steps", steps)
    lr = setting(cfg, "train.optimizer.lr", 1e-3)
    min_lr = setting(cfg, "train.lr_schedule.min_lr", lr / 10)
    warmup = setting(cfg, "train.lr_schedule.warmup_steps", 100)
    schedule = setting(cfg, "train.lr_schedule.name", "cosine")
    if schedule not in SCHEDULES:
        sys.exit("train.lr_schedule.name: %r is not implemented here %s" % (schedule, SCHEDULES))
    decay_fraction = setting(cfg, "train.lr_schedule.decay_fraction", 0.2)
    clip = setting(cfg, "train.grad_clip", 1.0)
    eval_interval = setting(cfg, "train.eval_interval", 250)
    optimizers = make_optimizers(model, cfg)
    ema = make_ema(model, cfg)

    times, loss, reached, gave_up = [], float("nan"), None, None
    t_start = time.perf_counter()
    for step in range(steps):
        # One factor for every optimizer (scaled as lr_at / lr, so base lr * factor is the same float).
        factor = lr_at(step, lr, min_lr, warmup, total, schedule, decay_fraction) / lr
        for opt, base in optimizers:
            for group in opt.param_groups:
                group["lr"] = base * factor
        set_muon_momentum(optimizers, cfg, step, total)
        t0 = time.perf_counter()
        x, y = given[step] if given else random_batch(train_tokens)
        differentiated, loss = training_loss_of(x, y, step, total)
        for opt, _ in optimizers:
            opt.zero_grad(set_to_none=True)
        differentiated.backward()
        if clip > 0:  # global norm over all parameters, before any optimizer reads the gradient
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        for opt, _ in optimizers:
            opt.step()
        if ema:
            ema.update(model)
        times.append(time.perf_counter() - t0)
        if a.log_steps:
            print(json.dumps({"step": step + 1, "lr": lr * factor, "loss": loss.item()}), flush=True)
        if a.target_loss is not None and ((step + 1) % eval_interval == 0 or step + 1 == steps):
            v = evaluate(val_tokens)  # the evaluation's time counts: the clock is the user's
            print(json.dumps({"step": step + 1, "val_loss": round(v, 4),
                              "seconds": round(time.perf_counter() - t_start, 1)}), flush=True)
            if v <= a.target_loss:
                reached = {"step": step + 1, "seconds": round(time.perf_counter() - t_start, 2)}
                steps = step + 1
                break
            if a.max_seconds is not None and time.perf_counter() - t_start > a.max_seconds:
                gave_up = {"step": step + 1, "seconds": round(time.perf_counter() - t_start, 2), "val_loss": round(v, 4)}
                steps = step + 1
                break
    train_seconds = time.perf_counter() - t_start
    if a.save_safetensors:
        save_safetensors(a.save_safetensors, dict(model.named_parameters()))
    if a.save_ema_safetensors:
        if not ema:
            sys.exit("--save-ema-safetensors: the config has no train.ema_decay")
        save_safetensors(a.save_ema_safetensors, ema.shadow)
    median = sorted(times)[len(times) // 2]  # the upper median, first steps included
    result = {"impl": "torch", "torch": torch.__version__, "threads": a.threads, "params": n_params,
              "objective": objective, "bf16": a.bf16, "steps": steps,
              "ms_per_step_median": round(median * 1e3, 3), "tokens_per_s": round(B * T / median, 1),
              "train_seconds": round(train_seconds, 2), "last_train_loss": round(loss.item(), 4)}
    result["val_loss"] = round(evaluate(val_tokens), 4)
    if a.target_loss is not None:
        result.update(target_loss=a.target_loss, reached=reached)
        if gave_up:
            result["time_limit"] = dict(gave_up, max_seconds=a.max_seconds)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
