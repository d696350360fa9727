#!/usr/bin/python3
"""Writes the PyTorch cross-check fixtures (tests/fixtures/) that the reference tests load.

    /usr/bin/python3 scripts/dev/make_fixtures.py            # rewrites tests/fixtures/*.json
    /usr/bin/python3 scripts/dev/make_fixtures.py --out DIR  # writes them to DIR instead

For each tiny model config: the weights (names as torch_lm.py --print-names), input tokens, targets,
logits, loss and every parameter's gradient, from scripts/torch_lm.py's own model (the reference of
docs/architecture.md), for tests/models/test_reference.cpp. Plus
torch.nn.MultiheadAttention cross-attention with kdim/vdim != d_model and a key-padding mask, and the
encoder-decoder of include/tfm/models/encoder_decoder.h written out below (Seq2Seq, same parameter
names) with source padding, S != T and a padded target (loss ignore_index = <pad> = 0), for
tests/models/test_encoder_decoder.cpp. And the head variants of include/tfm/nn/attention.h with a causal
mask and key padding: the head-mixing layers (MixedAttention below: talking_heads with grouped-query
K/V, group_mlp with additive scores) for tests/nn/test_head_mixing.cpp, and top-k head gating
(TopKGatedAttention, with its balance loss) for tests/models/test_reference.cpp.
And the optimizer fixture (optimizer_fixture): torch_lm.py's own training loop (Muon with AdamW, the
WSD schedule, clipping) on given batches from given weights, for tests/training/test_optim_reference.cpp.
`--only NAME` rewrites one fixture and leaves the others.
JSON: {"name": {"shape": [...], "data": [...]}} tensors, float32 values printed with 9 significant
digits (enough to round-trip a float32). The fixtures are committed so the tests need no Python.
"""
import argparse, json, math, os, subprocess, sys, tempfile

SCRIPTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # scripts/, beside dev/
REPO = os.path.dirname(SCRIPTS)
sys.path.insert(0, SCRIPTS)  # scripts/torch_lm.py


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            return next((set(line.split(":", 1)[1].split()) for line in f if line.startswith("flags")), set())
    except OSError:
        return set()


# The committed fixtures were written with OpenBLAS's Haswell (AVX2) kernels. Other kernels round
# differently (AVX-512's move logits and gradients by up to 3e-6, far inside the tests' tolerances);
# pinning them where the CPU can run them makes a rewrite change only what the code changed.
# Set before torch loads OpenBLAS; an OPENBLAS_CORETYPE of the caller's wins.
if "OPENBLAS_CORETYPE" not in os.environ and {"avx2", "fma"} <= cpu_flags():
    os.environ["OPENBLAS_CORETYPE"] = "Haswell"
import torch  # noqa: E402
import torch_lm  # noqa: E402

OUT = os.path.join(REPO, "tests", "fixtures")  # --out changes it

CONFIGS = {
    # pre-norm, sinusoidal positions, tied head, multi-head attention, GELU
    "lm_pre_sinusoidal_tied": dict(d_model=8, n_layers=2, n_heads=2, d_ff=24, max_seq_len=8,
                                   norm_position="pre", positional_encoding="sinusoidal",
                                   tie_embeddings=True, activation="gelu"),
    # post-norm, learned positions, untied head
    "lm_post_learned_untied": dict(d_model=8, n_layers=2, n_heads=2, d_ff=16, max_seq_len=8,
                                   norm_position="post", positional_encoding="learned",
                                   tie_embeddings=False, activation="gelu"),
    # grouped-query attention (4 query heads, 2 kv heads), ReLU, no biases
    "lm_gqa_relu": dict(d_model=16, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=32, max_seq_len=8,
                        norm_position="pre", positional_encoding="sinusoidal", tie_embeddings=True,
                        activation="relu", bias=False),
    # masked_lm: a bidirectional encoder, the loss over the chosen positions only (-100 elsewhere)
    "mlm_bidirectional": dict(d_model=8, n_layers=2, n_heads=2, d_ff=24, max_seq_len=8,
                              norm_position="pre", positional_encoding="sinusoidal", causal=False,
                              tie_embeddings=True, activation="gelu"),
    # the modern options together: RoPE, RMSNorm, SwiGLU, QK-norm, no biases, untied head, GQA
    "lm_modern": dict(d_model=16, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=24, max_seq_len=8,
                      norm_position="pre", positional_encoding="rope", rope_theta=1000.0, norm="rmsnorm",
                      norm_eps=1e-6, activation="swiglu", qk_norm=True, bias=False, tie_embeddings=False),
    # ... bidirectional (masked_lm), with biases and a tied head
    "mlm_modern": dict(d_model=16, n_layers=2, n_heads=4, d_ff=24, max_seq_len=8, norm_position="pre",
                       positional_encoding="rope", norm="rmsnorm", activation="swiglu", qk_norm=True,
                       causal=False, tie_embeddings=True),
    # the speedrun tricks together on the modern recipe: zero-init, logit softcap, x0 skip, value residual,
    # and a bigram table smaller than V^2 (hashed pairs share rows); three layers, two of them later ones
    "lm_tricks": dict(d_model=16, n_layers=3, n_heads=4, n_kv_heads=2, d_ff=24, max_seq_len=8,
                      norm_position="pre", positional_encoding="rope", norm="rmsnorm", activation="swiglu",
                      qk_norm=True, bias=False, tie_embeddings=False, zero_init=True, logit_softcap=5.0,
                      x0_skip=True, value_residual=True, bigram_buckets=50),
    # ... on the 2017 recipe (sinusoidal positions, LayerNorm, GELU, tied head), an exact bigram table (V^2)
    "lm_tricks_sinusoidal": dict(d_model=8, n_layers=2, n_heads=2, d_ff=24, max_seq_len=8,
                                 norm_position="pre", positional_encoding="sinusoidal", tie_embeddings=True,
                                 activation="gelu", logit_softcap=3.0, x0_skip=True, value_residual=True,
                                 bigram_buckets=121),
    # multi-token prediction: two extra heads on the modern recipe with an untied, soft-capped head (the
    # loss: next token + MTP_WEIGHT times the extra heads' mean loss); one on a post-norm model (no final
    # norm) with a tied head
    "lm_mtp": dict(d_model=16, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=24, max_seq_len=8, norm_position="pre",
                   positional_encoding="rope", norm="rmsnorm", activation="swiglu", bias=False,
                   tie_embeddings=False, logit_softcap=5.0, mtp_heads=2),
    "lm_mtp_post_tied": dict(d_model=8, n_layers=2, n_heads=2, d_ff=16, max_seq_len=8, norm_position="post",
                             positional_encoding="learned", activation="gelu", tie_embeddings=True, mtp_heads=1),
}
VOCAB, B, T = 11, 2, 6
MTP_WEIGHT = 0.3  # train.mtp_weight of the multi-token fixtures' loss


def tensor(t):
    a = t.detach().to(torch.float32).contiguous().view(-1).tolist()
    return {"shape": list(t.shape), "data": [float("%.9g" % x) for x in a]}


def write(name, obj):
    path = os.path.join(OUT, name + ".json")
    with open(path, "w") as f:
        json.dump(obj, f, separators=(",", ":"))
    print(path, os.path.getsize(path), "bytes")


def lm_fixture(name, model_cfg, seed):
    torch.manual_seed(seed)
    m = torch_lm.model_config({"model": model_cfg})
    model = torch_lm.LM(m, VOCAB)
    # Move away from the init so every path carries a gradient worth comparing: at std 0.02 the
    # attention scores are ~0 and the query/key gradients ~1e-10. Matrices get std ~0.3, biases and
    # LayerNorm parameters a perturbation off their 0/1 init.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
            elif p.std() == 0:  # zero-initialised (model.zero_init, the bigram table)
                p.normal_(0.0, 0.3)
            else:
                p.mul_(0.3 / p.std())
    tokens = torch.randint(VOCAB, (B, T))
    targets = torch.randint(VOCAB, (B, T))
    if not m["causal"]:  # masked_lm's loss reads the chosen positions only
        targets = torch.where(torch.rand(B, T) < 0.4, targets, torch.full_like(targets, -100))
        targets[0, 0] = 3  # at least one chosen position
    extra = {}
    if m["mtp_heads"]:  # the training loss: next token + weight * the extra heads' loss
        logits, heads = model(tokens, extra_heads=True)
        aux = torch_lm.mtp_loss(heads, targets)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, VOCAB), targets.view(-1)) + MTP_WEIGHT * aux
        extra = {"mtp_weight": MTP_WEIGHT, "mtp_loss": float(aux), "mtp_logits": [tensor(z) for z in heads]}
    else:
        logits = model(tokens)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))
    loss.backward()
    write(name, dict({
        "config": dict(m, vocab_size=VOCAB), "B": B, "T": T,
        "tokens": tokens.view(-1).tolist(), "targets": targets.view(-1).tolist(),
        "params": {n: tensor(p) for n, p in model.named_parameters()},
        "logits": tensor(logits), "loss": float(loss),
        "grads": {n: tensor(p.grad) for n, p in model.named_parameters()},
    }, **extra))


def mha_fixture(seed):
    torch.manual_seed(seed)
    d, h, kdim, vdim, Tq, Tk = 8, 2, 5, 3, 3, 4
    mha = torch.nn.MultiheadAttention(d, h, kdim=kdim, vdim=vdim, batch_first=True)
    with torch.no_grad():
        mha.in_proj_bias.normal_(0, 0.1)
        mha.out_proj.bias.normal_(0, 0.1)
    query = torch.randn(B, Tq, d, requires_grad=True)
    key = torch.randn(B, Tk, kdim, requires_grad=True)
    value = torch.randn(B, Tk, vdim, requires_grad=True)
    key_lengths = [4, 2]
    pad = torch.tensor([[j >= n for j in range(Tk)] for n in key_lengths])  # True = ignored
    out, weights = mha(query, key, value, key_padding_mask=pad, average_attn_weights=False)
    r = torch.randn_like(out)
    (out * r).sum().backward()
    bq, bk, bv = mha.in_proj_bias.split(d)
    gq, gk, gv = mha.in_proj_bias.grad.split(d)
    # Our names: wq/wk/wv/wo.{weight,bias} with weights (out, in), as torch stores them.
    write("mha_cross_kdim_vdim", {
        "d_model": d, "n_heads": h, "kdim": kdim, "vdim": vdim, "key_lengths": key_lengths,
        "query": tensor(query), "key": tensor(key), "value": tensor(value), "r": tensor(r),
        "params": {"wq.weight": tensor(mha.q_proj_weight), "wq.bias": tensor(bq),
                   "wk.weight": tensor(mha.k_proj_weight), "wk.bias": tensor(bk),
                   "wv.weight": tensor(mha.v_proj_weight), "wv.bias": tensor(bv),
                   "wo.weight": tensor(mha.out_proj.weight), "wo.bias": tensor(mha.out_proj.bias)},
        "out": tensor(out), "probabilities": tensor(weights),
        "grads": {"wq.weight": tensor(mha.q_proj_weight.grad), "wq.bias": tensor(gq),
                  "wk.weight": tensor(mha.k_proj_weight.grad), "wk.bias": tensor(gk),
                  "wv.weight": tensor(mha.v_proj_weight.grad), "wv.bias": tensor(gv),
                  "wo.weight": tensor(mha.out_proj.weight.grad), "wo.bias": tensor(mha.out_proj.bias.grad),
                  "query": tensor(query.grad), "key": tensor(key.grad), "value": tensor(value.grad)},
    })


# ---- the encoder-decoder (include/tfm/models/encoder_decoder.h), written out with its parameter names ----
F = torch.nn.functional
nn = torch.nn


class Attention(nn.Module):
    """Queries from x, keys/values from mem (= x for self-attention); causal and key-padding masks."""

    def __init__(self, d, h, hkv, bias):
        super().__init__()
        self.h, self.hkv, self.dk = h, hkv, d // h
        self.wq = nn.Linear(d, h * self.dk, bias=bias)
        self.wk = nn.Linear(d, hkv * self.dk, bias=bias)
        self.wv = nn.Linear(d, hkv * self.dk, bias=bias)
        self.wo = nn.Linear(h * self.dk, d, bias=bias)

    def forward(self, x, mem, causal=False, key_lengths=None):
        B, Tq, _ = x.shape
        Tk = mem.shape[1]
        q = self.wq(x).view(B, Tq, self.h, self.dk).transpose(1, 2)
        k = self.wk(mem).view(B, Tk, self.hkv, self.dk).transpose(1, 2)
        v = self.wv(mem).view(B, Tk, self.hkv, self.dk).transpose(1, 2)
        k = k.repeat_interleave(self.h // self.hkv, dim=1)
        v = v.repeat_interleave(self.h // self.hkv, dim=1)
        s = q @ k.transpose(-2, -1) / math.sqrt(self.dk)  # (B, H, Tq, Tk)
        if causal:
            s = s.masked_fill(torch.ones(Tq, Tk, dtype=torch.bool).triu(1), float("-inf"))
        if key_lengths is not None:
            pad = torch.arange(Tk)[None, :] >= torch.tensor(key_lengths)[:, None]  # (B, Tk)
            s = s.masked_fill(pad[:, None, None, :], float("-inf"))
        o = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, Tq, self.h * self.dk)
        return self.wo(o)


class Seq2SeqBlock(nn.Module):
    """Encoder block (ln1, ln2, attn, fc1, fc2) or decoder block (ln1, attn, ln2, cross, ln3, fc1, fc2)."""

    def __init__(self, m, decoder):
        super().__init__()
        d, bias = m["d_model"], m["bias"]
        self.pre, self.decoder = m["norm_position"] == "pre", decoder
        self.ln1, self.ln2 = nn.LayerNorm(d, eps=1e-5), nn.LayerNorm(d, eps=1e-5)
        self.attn = Attention(d, m["n_heads"], m["n_kv_heads"], bias)
        if decoder:
            self.cross = Attention(d, m["n_heads"], m["n_kv_heads"], bias)
            self.ln3 = nn.LayerNorm(d, eps=1e-5)
        self.fc1 = nn.Linear(d, m["d_ff"], bias=bias)
        self.fc2 = nn.Linear(m["d_ff"], d, bias=bias)
        self.act = F.gelu if m["activation"] == "gelu" else F.relu

    def sublayer(self, ln, x, f):
        return x + f(ln(x)) if self.pre else ln(x + f(x))

    def forward(self, x, mem, src_lengths):
        if not self.decoder:
            x = self.sublayer(self.ln1, x, lambda a: self.attn(a, a, key_lengths=src_lengths))
            return self.sublayer(self.ln2, x, lambda a: self.fc2(self.act(self.fc1(a))))
        x = self.sublayer(self.ln1, x, lambda a: self.attn(a, a, causal=True))
        x = self.sublayer(self.ln2, x, lambda a: self.cross(a, mem, key_lengths=src_lengths))
        return self.sublayer(self.ln3, x, lambda a: self.fc2(self.act(self.fc1(a))))


class Seq2Seq(nn.Module):
    def __init__(self, m):
        super().__init__()
        d = m["d_model"]
        self.m, self.pre = m, m["norm_position"] == "pre"
        self.sinusoidal = m["positional_encoding"] == "sinusoidal"
        self.register_buffer("pe", torch_lm.sinusoidal(m["max_seq_len"], d))
        self.src_emb = nn.Embedding(m["source_vocab_size"], d)
        if not self.sinusoidal:
            self.src_pos = nn.Embedding(m["max_seq_len"], d)
        self.encoder = nn.Module()
        self.encoder.blocks = nn.ModuleList(Seq2SeqBlock(m, False) for _ in range(m["n_encoder_layers"]))
        if self.pre:
            self.encoder.ln_f = nn.LayerNorm(d, eps=1e-5)
        self.tgt_emb = nn.Embedding(m["vocab_size"], d)
        if not self.sinusoidal:
            self.tgt_pos = nn.Embedding(m["max_seq_len"], d)
        self.decoder = nn.Module()
        self.decoder.blocks = nn.ModuleList(Seq2SeqBlock(m, True) for _ in range(m["n_decoder_layers"]))
        if self.pre:
            self.decoder.ln_f = nn.LayerNorm(d, eps=1e-5)
        if not m["tie_embeddings"]:
            self.head = nn.Linear(d, m["vocab_size"], bias=False)

    def embed(self, emb, pos, ids):
        T = ids.shape[1]
        if self.sinusoidal:
            return emb(ids) * math.sqrt(self.m["d_model"]) + self.pe[:T]
        return emb(ids) + pos.weight[:T]

    def forward(self, src, src_lengths, tgt_in):
        x = self.embed(self.src_emb, getattr(self, "src_pos", None), src)
        for b in self.encoder.blocks:
            x = b(x, None, src_lengths)
        mem = self.encoder.ln_f(x) if self.pre else x
        y = self.embed(self.tgt_emb, getattr(self, "tgt_pos", None), tgt_in)
        for b in self.decoder.blocks:
            y = b(y, mem, src_lengths)
        if self.pre:
            y = self.decoder.ln_f(y)
        return self.head(y) if not self.m["tie_embeddings"] else y @ self.tgt_emb.weight.t()


SEQ2SEQ_CONFIGS = {
    # pre-norm, sinusoidal, tied target embedding / head, GELU
    "seq2seq_pre_sinusoidal_tied": dict(norm_position="pre", positional_encoding="sinusoidal",
                                        tie_embeddings=True, activation="gelu", n_heads=2, n_kv_heads=2),
    # post-norm (d2l's AddNorm), learned positions, untied head, ReLU, multi-query attention
    "seq2seq_post_learned_untied": dict(norm_position="post", positional_encoding="learned",
                                        tie_embeddings=False, activation="relu", n_heads=2, n_kv_heads=1),
}


def seq2seq_fixture(name, overrides, seed):
    torch.manual_seed(seed)
    m = dict(vocab_size=13, source_vocab_size=11, d_model=16, n_encoder_layers=2, n_decoder_layers=2, d_ff=32,
             max_seq_len=8, bias=True, attention_score="dot")
    m.update(overrides)
    model = Seq2Seq(m)
    with torch.no_grad():  # away from the init, as lm_fixture
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
            elif p.std() == 0:  # zero-initialised (model.zero_init, the bigram table)
                p.normal_(0.0, 0.3)
            else:
                p.mul_(0.3 / p.std())
    Bs, S, T = 3, 5, 4
    src_lengths = [5, 3, 2]  # <eos> included; the rest is <pad> = 0
    tgt_lengths = [4, 2, 3]  # tgt_out real tokens; tgt_in = <bos> y, pad after
    src = torch.zeros(Bs, S, dtype=torch.long)
    tgt_in = torch.zeros(Bs, T, dtype=torch.long)
    tgt_out = torch.zeros(Bs, T, dtype=torch.long)
    for b in range(Bs):
        src[b, :src_lengths[b] - 1] = torch.randint(4, m["source_vocab_size"], (src_lengths[b] - 1,))
        src[b, src_lengths[b] - 1] = 2
        y = torch.randint(4, m["vocab_size"], (tgt_lengths[b] - 1,))
        tgt_in[b, 0] = 1
        tgt_in[b, 1:tgt_lengths[b]] = y
        tgt_out[b, :tgt_lengths[b] - 1] = y
        tgt_out[b, tgt_lengths[b] - 1] = 2
    logits = model(src, src_lengths, tgt_in)
    loss = F.cross_entropy(logits.reshape(-1, m["vocab_size"]), tgt_out.view(-1), ignore_index=0)
    loss.backward()
    write(name, {
        "config": m, "B": Bs, "S": S, "T": T, "src": src.view(-1).tolist(), "src_lengths": src_lengths,
        "tgt_in": tgt_in.view(-1).tolist(), "tgt_out": tgt_out.view(-1).tolist(),
        "params": {n: tensor(p) for n, p in model.named_parameters()},
        "logits": tensor(logits), "loss": float(loss),
        "grads": {n: tensor(p.grad) for n, p in model.named_parameters()},
    })


# ---- top-k head gating (MultiHeadAttention with gating "topk"; Mixture of Attention heads, Zhang et al. 2022) ----
class TopKGatedAttention(nn.Module):
    """Self-attention where each token uses its k highest-scoring heads (Mixture of Attention heads):
    out = Wo concat_h(w_h head_h), w = softmax over the token's top-k gate logits G = x Wg^T (0 for the
    other heads); plus the Switch Transformer's balance term, weight * H * sum_h f_h P_h."""

    def __init__(self, d, h, hkv, k, balance):
        super().__init__()
        self.h, self.hkv, self.dk, self.k, self.balance = h, hkv, d // h, k, balance
        self.wq = nn.Linear(d, d)
        self.wk = nn.Linear(d, hkv * self.dk)
        self.wv = nn.Linear(d, hkv * self.dk)
        self.wo = nn.Linear(d, d)
        self.gate = nn.Linear(d, h, bias=False)

    def forward(self, x, key_lengths, causal):
        B, T, C = x.shape
        q = self.wq(x).view(B, T, self.h, self.dk).transpose(1, 2)                      # (B, H, T, Dk)
        rep = self.h // self.hkv
        k = self.wk(x).view(B, T, self.hkv, self.dk).transpose(1, 2).repeat_interleave(rep, 1)
        v = self.wv(x).view(B, T, self.hkv, self.dk).transpose(1, 2).repeat_interleave(rep, 1)
        s = q @ k.transpose(-1, -2) / math.sqrt(self.dk)                                 # (B, H, T, T)
        hidden = torch.zeros(B, 1, T, T, dtype=torch.bool)
        for b in range(B):
            hidden[b, :, :, key_lengths[b]:] = True
        if causal:
            hidden = hidden | torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        p = torch.softmax(s.masked_fill(hidden, float("-inf")), -1)
        heads = (p @ v).transpose(1, 2)                                                  # (B, T, H, Dk)
        g = self.gate(x)                                                                 # (B, T, H)
        top = torch.topk(g, self.k, -1).indices
        chosen = torch.zeros_like(g, dtype=torch.bool).scatter(-1, top, True)
        w = torch.softmax(g.masked_fill(~chosen, float("-inf")), -1)                    # (B, T, H)
        out = self.wo((heads * w.unsqueeze(-1)).reshape(B, T, C))
        f = chosen.float().sum((0, 1)) / (B * T * self.k)                                # (H)
        aux = self.balance * self.h * (f * torch.softmax(g, -1).mean((0, 1))).sum()
        return out, aux


def gating_fixture(seed):
    torch.manual_seed(seed)
    d, h, hkv, k, balance, T = 16, 4, 2, 2, 0.5, 5
    layer = TopKGatedAttention(d, h, hkv, k, balance)
    with torch.no_grad():
        for p in layer.parameters():
            p.normal_(0, 0.4)
    x = torch.randn(B, T, d, requires_grad=True)
    key_lengths = [5, 3]
    out, aux = layer(x, key_lengths, causal=True)
    r = torch.randn_like(out)
    ((out * r).sum() + aux).backward()
    write("mha_topk_gating", {
        "d_model": d, "n_heads": h, "n_kv_heads": hkv, "top_k": k, "balance_loss": balance, "causal": True,
        "key_lengths": key_lengths, "x": tensor(x), "r": tensor(r),
        "params": {n: tensor(p) for n, p in layer.named_parameters()},
        "out": tensor(out), "aux": float(aux),
        "grads": dict({n: tensor(p.grad) for n, p in layer.named_parameters()}, x=tensor(x.grad)),
    })



# ---- head mixing (include/tfm/nn/attention.h: talking_heads, group_mlp), with our parameter names ----
class MixedAttention(nn.Module):
    """Self-attention whose heads' logits and probabilities are mixed inside g groups of n = H / g heads:
    S'[b, grp*n + o] = sum_i mix_logits[grp, o, i] S[b, grp*n + i] before the masks and softmax, the
    probabilities likewise with mix_weights after it; group_mlp's output is out_mlp = fc2(gelu(fc1(o)))."""

    def __init__(self, d, h, hkv, score, mixing, groups):
        super().__init__()
        self.h, self.hkv, self.dk, self.score, self.mixing = h, hkv, d // h, score, mixing
        self.g = groups if mixing == "group_mlp" else 1
        n = h // self.g
        self.wq = nn.Linear(d, h * self.dk)
        self.wk = nn.Linear(d, hkv * self.dk)
        self.wv = nn.Linear(d, hkv * self.dk)
        if mixing == "group_mlp":
            self.out_mlp = nn.ModuleDict({"fc1": nn.Linear(d, d), "fc2": nn.Linear(d, d)})
        else:
            self.wo = nn.Linear(h * self.dk, d)
        if score == "additive":
            self.score_v = nn.Parameter(torch.randn(h, self.dk))
        # Random, away from the identity, so the mixing is exercised.
        self.mix_logits = nn.Parameter(torch.eye(n).repeat(self.g, 1, 1) + 0.5 * torch.randn(self.g, n, n))
        self.mix_weights = nn.Parameter(torch.eye(n).repeat(self.g, 1, 1) + 0.5 * torch.randn(self.g, n, n))

    def mix(self, x, m):  # x (B, H, Tq, Tk), m (g, n, n) [group, out, in]
        B, H, Tq, Tk = x.shape
        x = x.view(B, self.g, H // self.g, Tq, Tk)
        return torch.einsum("goi,bgiqk->bgoqk", m, x).reshape(B, H, Tq, Tk)

    def forward(self, x, key_lengths):
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.h, self.dk).transpose(1, 2)  # (B, H, T, Dk)
        k = self.wk(x).view(B, T, self.hkv, self.dk).transpose(1, 2).repeat_interleave(self.h // self.hkv, dim=1)
        v = self.wv(x).view(B, T, self.hkv, self.dk).transpose(1, 2).repeat_interleave(self.h // self.hkv, dim=1)
        if self.score == "dot":
            s = q @ k.transpose(-2, -1) / math.sqrt(self.dk)  # (B, H, T, T)
        else:  # w_v^T tanh(q + k) per head
            s = (torch.tanh(q[:, :, :, None, :] + k[:, :, None, :, :]) * self.score_v[None, :, None, None, :]).sum(-1)
        s = self.mix(s, self.mix_logits)  # mixed before the masks
        hidden = torch.ones(T, T, dtype=torch.bool).triu(1)[None, None] | \
            (torch.arange(T)[None, :] >= torch.tensor(key_lengths)[:, None])[:, None, None, :]
        p = torch.softmax(s.masked_fill(hidden, float("-inf")), dim=-1)
        p = self.mix(p, self.mix_weights)
        o = (p @ v).transpose(1, 2).reshape(B, T, self.h * self.dk)
        out = self.out_mlp["fc2"](F.gelu(self.out_mlp["fc1"](o))) if self.mixing == "group_mlp" else self.wo(o)
        return out, p


def head_mixing_fixture(name, h, hkv, score, mixing, groups, seed):
    torch.manual_seed(seed)
    d, Bs, T = 8, 2, 5
    layer = MixedAttention(d, h, hkv, score, mixing, groups)
    with torch.no_grad():  # biases away from zero too
        for n_, p in layer.named_parameters():
            if n_.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    x = torch.randn(Bs, T, d, requires_grad=True)
    key_lengths = [5, 3]
    out, probs = layer(x, key_lengths)
    r = torch.randn_like(out)
    (out * r).sum().backward()
    write(name, {
        "d_model": d, "n_heads": h, "n_kv_heads": hkv, "score": score, "mixing": mixing, "groups": groups,
        "key_lengths": key_lengths, "x": tensor(x), "r": tensor(r),
        "params": {n_: tensor(p) for n_, p in layer.named_parameters()},
        "out": tensor(out), "probabilities": tensor(probs),
        "grads": dict({n_: tensor(p.grad) for n_, p in layer.named_parameters()}, x=tensor(x.grad)),
    })


# Muon on the blocks' matrices (wq, wk, wv, wo (C, C); fc1 (F, C) tall, fc2 (C, F) wide) with weight
# decay, AdamW on the embedding, learned positions, untied head, biases and gains; WSD with a warmup and
# a decay over the last 3 of 10 steps; clipping active (the gradient norm is above 0.3 at every step).
OPTIMIZER_CONFIG = {
    "seed": 500,
    "model": dict(d_model=16, n_layers=2, n_heads=2, d_ff=40, max_seq_len=8, positional_encoding="learned",
                  tie_embeddings=False),
    "train": {"batch_size": 3, "seq_len": 8, "max_steps": 10, "grad_clip": 0.3,
              "optimizer": {"name": "muon", "lr": 3e-3, "weight_decay": 0.1, "muon_lr": 0.02,
                            "muon_momentum": 0.95, "muon_weight_decay": 0.1},
              "lr_schedule": {"name": "wsd", "warmup_steps": 2, "min_lr": 3e-4, "decay_fraction": 0.3}},
}


# The optimizer options that are off by default, all on: Muon's momentum warmup (0.85 -> 0.95 over the first
# 4 steps) and cooldown (back over the last 3), cautious weight decay on Muon's matrices, and an EMA of the
# weights (decay 0.8, so the 10 steps move it well away from the initial weights).
OPTIMIZER_TRICKS_CONFIG = json.loads(json.dumps(OPTIMIZER_CONFIG))
OPTIMIZER_TRICKS_CONFIG["train"]["optimizer"].update(
    muon_momentum_warmup_steps=4, muon_momentum_cooldown_steps=3, muon_momentum_min=0.85,
    muon_cautious_weight_decay=True)
OPTIMIZER_TRICKS_CONFIG["train"]["ema_decay"] = 0.8


def optimizer_fixture(name, seed, config=OPTIMIZER_CONFIG):
    """torch_lm.py trains `config` for max_steps steps through its optimizer-parity options
    (--init-safetensors, --batches, --save-safetensors, --log-steps), in a subprocess: the fixture holds
    the config, the initial weights, the batches, each step's lr and loss, and the final weights (and
    with train.ema_decay the final EMA of the weights)."""
    torch.manual_seed(seed)
    cfg = json.loads(json.dumps(config))
    ema = cfg["train"].get("ema_decay", 0) > 0
    m = torch_lm.model_config(cfg)
    model = torch_lm.LM(m, VOCAB)
    steps, Bs, Ts = cfg["train"]["max_steps"], cfg["train"]["batch_size"], cfg["train"]["seq_len"]
    stream = torch.randint(VOCAB, (steps, Bs, Ts + 1))
    x, y = stream[:, :, :-1], stream[:, :, 1:]  # next-token targets
    chars = "abcdefghijk"[:VOCAB]  # the reference's char vocabulary: the file's sorted distinct characters
    with tempfile.TemporaryDirectory() as tmp:
        files = {k: os.path.join(tmp, k) for k in ("data.txt", "config.json", "init.safetensors", "batches.json",
                                                   "final.safetensors", "ema.safetensors")}
        with open(files["data.txt"], "w") as f:  # only its vocabulary and validation split are read
            f.write("".join(chars[i] for i in torch.randint(VOCAB, (400,)).tolist()) + chars)
        cfg["data"] = {"path": files["data.txt"]}
        with open(files["config.json"], "w") as f:
            json.dump(cfg, f)
        torch_lm.save_safetensors(files["init.safetensors"], dict(model.named_parameters()))
        with open(files["batches.json"], "w") as f:
            json.dump({"x": x.tolist(), "y": y.tolist()}, f)
        out = subprocess.run([sys.executable, os.path.join(SCRIPTS, "torch_lm.py"), "--config", files["config.json"],
                              "--init-safetensors", files["init.safetensors"], "--batches", files["batches.json"],
                              "--save-safetensors", files["final.safetensors"], "--log-steps", "--threads", "1"]
                             + (["--save-ema-safetensors", files["ema.safetensors"]] if ema else []),
                             check=True, capture_output=True, text=True).stdout
        final = torch_lm.load_safetensors(files["final.safetensors"])
        averaged = torch_lm.load_safetensors(files["ema.safetensors"]) if ema else None
    log = [json.loads(line) for line in out.splitlines() if line.startswith('{"step"')]
    assert len(log) == steps, out
    del cfg["data"]
    write(name, {
        "config": cfg, "vocab_size": VOCAB, "x": x.tolist(), "y": y.tolist(),
        "lr": [r["lr"] for r in log], "loss": [r["loss"] for r in log],
        "init": {n: tensor(p) for n, p in model.named_parameters()},
        "final": {n: tensor(t) for n, t in final.items()},
        **({"ema": {n: tensor(t) for n, t in averaged.items()}} if ema else {}),
    })


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=OUT, help="output directory (default: tests/fixtures)")
    ap.add_argument("--only", metavar="NAME", nargs="*", help="write only these fixtures (e.g. lm_muon_wsd)")
    args = ap.parse_args()
    OUT = args.out
    os.makedirs(OUT, exist_ok=True)
    torch.set_num_threads(1)
    jobs = [(name, lambda name=name, cfg=cfg, i=i: lm_fixture(name, cfg, 100 + i))
            for i, (name, cfg) in enumerate(CONFIGS.items())]
    jobs.append(("mha_cross_kdim_vdim", lambda: mha_fixture(200)))
    jobs += [(name, lambda name=name, cfg=cfg, i=i: seq2seq_fixture(name, cfg, 300 + i))
             for i, (name, cfg) in enumerate(SEQ2SEQ_CONFIGS.items())]
    jobs.append(("mha_topk_gating", lambda: gating_fixture(400)))
    jobs.append(("head_mixing_talking_heads_gqa",
                 lambda: head_mixing_fixture("head_mixing_talking_heads_gqa", 4, 2, "dot", "talking_heads", 1, 400)))
    jobs.append(("head_mixing_group_mlp_additive",
                 lambda: head_mixing_fixture("head_mixing_group_mlp_additive", 4, 4, "additive", "group_mlp", 2, 401)))
    jobs.append(("lm_muon_wsd", lambda: optimizer_fixture("lm_muon_wsd", 500)))
    jobs.append(("lm_muon_tricks", lambda: optimizer_fixture("lm_muon_tricks", 501, OPTIMIZER_TRICKS_CONFIG)))
    unknown = [n for n in args.only or [] if n not in dict(jobs)]
    if unknown:
        sys.exit("--only %s: no such fixture (%s)" % (", ".join(unknown), ", ".join(n for n, _ in jobs)))
    for name, job in jobs:
        if not args.only or name in args.only:
            job()
