#!/usr/bin/python3
"""Writes the PyTorch cross-check fixtures that tests/test_reference.cpp loads.

    /usr/bin/python3 scripts/make_fixtures.py      # rewrites tests/fixtures/*.json

For each tiny model config: the weights (names as torch_lm.py --print-names), input tokens, targets,
logits, loss and every parameter's gradient, from ../shared/reference/torch_lm.py's own model. Plus
torch.nn.MultiheadAttention cross-attention with kdim/vdim != d_model and a key-padding mask.
JSON: {"name": {"shape": [...], "data": [...]}} tensors, float32 values printed with 9 significant
digits (enough to round-trip a float32). The fixtures are committed so the tests need no Python.
"""
import json, os, sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "..", "shared", "reference"))
import torch  # noqa: E402
import torch_lm  # noqa: E402

OUT = os.path.join(REPO, "tests", "fixtures")

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
}
VOCAB, B, T = 11, 2, 6


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
            else:
                p.mul_(0.3 / p.std())
    tokens = torch.randint(VOCAB, (B, T))
    targets = torch.randint(VOCAB, (B, T))
    if not m["causal"]:  # masked_lm's loss reads the chosen positions only
        targets = torch.where(torch.rand(B, T) < 0.4, targets, torch.full_like(targets, -100))
        targets[0, 0] = 3  # at least one chosen position
    logits = model(tokens)
    loss = torch.nn.functional.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))
    loss.backward()
    write(name, {
        "config": dict(m, vocab_size=VOCAB), "B": B, "T": T,
        "tokens": tokens.view(-1).tolist(), "targets": targets.view(-1).tolist(),
        "params": {n: tensor(p) for n, p in model.named_parameters()},
        "logits": tensor(logits), "loss": float(loss),
        "grads": {n: tensor(p.grad) for n, p in model.named_parameters()},
    })


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


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    torch.set_num_threads(1)
    for i, (name, cfg) in enumerate(CONFIGS.items()):
        lm_fixture(name, cfg, 100 + i)
    mha_fixture(200)
