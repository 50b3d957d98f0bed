#!/usr/bin/env python3
"""Train arbiter's tool-calling model on a corpus that `arbiter model corpus` wrote.

The model is a llama (RMS norm, rotary embeddings on adjacent pairs as llama.cpp's
"normal" rope type computes them, SwiGLU, no biases) whose parameters are saved under
their GGUF names, so that `arbiter model gguf` writes them as they are. Training runs for
a fixed wall-clock budget: first on short windows (most conversations are short), then
on windows as long as the longest conversations, each window starting at a
conversation's first token. Only the assistant's tokens are learned (learn.u8).

    python3 toolmodel/train.py --corpus CORPUS --out model.safetensors --minutes 6
"""

import argparse
import json
import math
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", required=True, help="folder written by `arbiter model corpus`")
    p.add_argument("--out", required=True, help="checkpoint to write (safetensors, F16)")
    p.add_argument("--log", help="training log to write (JSON)")
    p.add_argument("--minutes", type=float, default=6.0, help="wall-clock training budget")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ffn", type=int, default=704)
    p.add_argument("--context", type=int, default=20480, help="llama.context_length, and the long windows' length")
    p.add_argument("--short-len", type=int, default=2048)
    p.add_argument("--short-batch", type=int, default=64)
    p.add_argument("--long-batch", type=int, default=4)
    p.add_argument("--long-share", type=float, default=0.35, help="share of the budget spent on long windows")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--rope-base", type=float, default=100000.0)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    return p.parse_args()


RMS_EPS = 1e-5


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + RMS_EPS)).type_as(x) * self.weight


def rope_tables(context, head_dim, base, device):
    inv = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    ang = torch.arange(context, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(ang).float().to(device), torch.sin(ang).float().to(device)


def apply_rope(x, cos, sin):
    # x: (B, H, T, D); rotate adjacent pairs (0,1), (2,3), ... as llama.cpp's normal rope.
    t = x.shape[2]
    xr = x.float().reshape(*x.shape[:-1], -1, 2)
    x0, x1 = xr[..., 0], xr[..., 1]
    c, s = cos[:t], sin[:t]
    out = torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1)
    return out.reshape(x.shape).type_as(x)


def attention(q, k, v):
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    t = q.shape[2]
    att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
    return att.masked_fill(mask, float("-inf")).softmax(-1) @ v


class Block(nn.Module):
    def __init__(self, d, heads, ffn):
        super().__init__()
        self.heads = heads
        self.attn_norm = RMSNorm(d)
        self.attn_q = nn.Linear(d, d, bias=False)
        self.attn_k = nn.Linear(d, d, bias=False)
        self.attn_v = nn.Linear(d, d, bias=False)
        self.attn_output = nn.Linear(d, d, bias=False)
        self.ffn_norm = RMSNorm(d)
        self.ffn_gate = nn.Linear(d, ffn, bias=False)
        self.ffn_up = nn.Linear(d, ffn, bias=False)
        self.ffn_down = nn.Linear(ffn, d, bias=False)

    def forward(self, x, cos, sin):
        b, t, d = x.shape
        h = self.attn_norm(x)
        shape = (b, t, self.heads, d // self.heads)
        q = self.attn_q(h).view(shape).transpose(1, 2)
        k = self.attn_k(h).view(shape).transpose(1, 2)
        v = self.attn_v(h).view(shape).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        a = attention(q, k, v).transpose(1, 2).reshape(b, t, d)
        x = x + self.attn_output(a)
        h = self.ffn_norm(x)
        return x + self.ffn_down(F.silu(self.ffn_gate(h)) * self.ffn_up(h))


class Llama(nn.Module):
    def __init__(self, vocab, args):
        super().__init__()
        self.token_embd = nn.Embedding(vocab, args.width)
        self.blocks = nn.ModuleList(Block(args.width, args.heads, args.ffn) for _ in range(args.layers))
        self.output_norm = RMSNorm(args.width)
        self.output = nn.Linear(args.width, vocab, bias=False)
        cos, sin = rope_tables(args.context, args.width // args.heads, args.rope_base, "cpu")
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02
                if name.endswith("attn_output.weight") or name.endswith("ffn_down.weight"):
                    std /= math.sqrt(2 * args.layers)
                nn.init.normal_(p, 0.0, std)

    def hidden(self, ids):
        x = self.token_embd(ids)
        for blk in self.blocks:
            x = blk(x, self.cos, self.sin)
        return self.output_norm(x)

    def gguf_tensors(self):
        """The parameters under their GGUF names, in PyTorch's shapes."""
        out = {"token_embd.weight": self.token_embd.weight}
        for i, blk in enumerate(self.blocks):
            for name, p in blk.named_parameters():
                out[f"blk.{i}.{name}"] = p
        out["output_norm.weight"] = self.output_norm.weight
        out["output.weight"] = self.output.weight
        return out


def save_safetensors(path, tensors, metadata):
    """Writes tensors as F16 in the safetensors format (header length, JSON header, data)."""
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        a = tensors[name].detach().float().cpu().numpy().astype("<f2")
        b = a.tobytes()
        header[name] = {"dtype": "F16", "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


class Corpus:
    def __init__(self, folder):
        self.tokens = np.fromfile(f"{folder}/tokens.u16", dtype="<u2")
        self.learn = np.fromfile(f"{folder}/learn.u8", dtype=np.uint8)
        self.starts = np.fromfile(f"{folder}/docs.u64", dtype="<u8").astype(np.int64)
        with open(f"{folder}/corpus.json") as f:
            self.summary = json.load(f)
        self.lengths = np.diff(np.append(self.starts, len(self.tokens)))
        # The last 1% of conversations are held out to measure accuracy on.
        n = len(self.starts)
        self.held = max(1, n // 100)
        self.train_docs = np.arange(n - self.held)
        self.test_docs = np.arange(n - self.held, n)

    def window(self, rng, docs, length):
        """length+1 tokens from a random conversation's first token on (the following
        conversations fill the rest), and the learn flags of the targets."""
        while True:
            s = self.starts[docs[rng.integers(len(docs))]]
            if s + length + 1 <= len(self.tokens):
                break
        ids = self.tokens[s:s + length + 1].astype(np.int64)
        return ids, self.learn[s + 1:s + length + 1]

    def batch(self, rng, docs, length, n, device):
        ids, learn = zip(*(self.window(rng, docs, length) for _ in range(n)))
        ids = torch.from_numpy(np.stack(ids)).to(device)
        learn = torch.from_numpy(np.stack(learn).astype(np.bool_)).to(device)
        return ids[:, :-1], ids[:, 1:], learn


def step_loss(model, x, y, learn, amp):
    with torch.autocast(device_type=x.device.type, dtype=torch.bfloat16, enabled=amp):
        h = model.hidden(x)
        h = h[learn]
        logits = model.output(h).float()
    tgt = y[learn]
    loss = F.cross_entropy(logits, tgt)
    acc = (logits.argmax(-1) == tgt).float().mean()
    return loss, acc


def main():
    args = parse_args()
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    dev = torch.device(args.device)
    amp = dev.type == "cuda"
    if amp:
        torch.backends.cuda.matmul.allow_tf32 = True
    corpus = Corpus(args.corpus)
    vocab = int(corpus.summary["vocab_size"])
    model = Llama(vocab, args).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    long_docs = corpus.train_docs[corpus.lengths[corpus.train_docs] > args.short_len]
    budget = args.minutes * 60
    print(f"{n_params} parameters, vocabulary {vocab}, {len(corpus.tokens)} corpus tokens, "
          f"{len(long_docs)} long conversations; {args.minutes} minutes on {dev}", flush=True)
    log = {"args": vars(args), "parameters": n_params, "vocab": vocab, "corpus": corpus.summary, "steps": []}
    start = time.time()
    step, seen, warmup = 0, 0, 100
    recent = []
    while True:
        frac = (time.time() - start) / budget
        if frac >= 1:
            break
        long_phase = frac >= 1 - args.long_share and len(long_docs) > 0
        if long_phase:
            x, y, learn = corpus.batch(rng, long_docs, min(args.context, int(corpus.lengths.max())), args.long_batch, dev)
        else:
            x, y, learn = corpus.batch(rng, corpus.train_docs, args.short_len, args.short_batch, dev)
        lr = args.lr * min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))
        for g in opt.param_groups:
            g["lr"] = lr
        loss, acc = step_loss(model, x, y, learn, amp)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        seen += x.numel()
        recent.append((loss.item(), acc.item()))
        if step % 50 == 0:
            l, a = np.mean([r[0] for r in recent]), np.mean([r[1] for r in recent])
            recent = []
            el = time.time() - start
            row = {"step": step, "seconds": round(el, 1), "phase": "long" if long_phase else "short",
                   "loss": round(float(l), 4), "accuracy": round(float(a), 4), "lr": lr, "tokens": seen,
                   "tokens_per_second": round(seen / el)}
            log["steps"].append(row)
            print(json.dumps(row), flush=True)
    model.eval()
    held = {}
    with torch.no_grad():
        for name, docs, length, n in (("short", corpus.test_docs, args.short_len, 32),
                                      ("long", corpus.test_docs[corpus.lengths[corpus.test_docs] > args.short_len],
                                       min(args.context, int(corpus.lengths.max())), 2)):
            if len(docs) == 0:
                continue
            x, y, learn = corpus.batch(rng, docs, length, n, dev)
            loss, acc = step_loss(model, x, y, learn, amp)
            held[name] = {"loss": round(loss.item(), 4), "accuracy": round(acc.item(), 4)}
    log.update({"seconds": round(time.time() - start, 1), "steps_run": step, "tokens_seen": seen, "held_out": held})
    print(json.dumps({"held_out": held, "steps": step, "tokens_seen": seen}), flush=True)
    md = {"block_count": args.layers, "embedding_length": args.width, "head_count": args.heads,
          "head_count_kv": args.heads, "feed_forward_length": args.ffn, "context_length": args.context,
          "rope_freq_base": args.rope_base, "rms_epsilon": RMS_EPS}
    save_safetensors(args.out, model.gguf_tensors(), {k: str(v) for k, v in md.items()})
    if args.log:
        with open(args.log, "w") as f:
            json.dump(log, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
