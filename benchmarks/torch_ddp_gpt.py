#!/usr/bin/python3
"""PyTorch DDP peer of `tessera train benchmarks/gpt_ddp.toml`.

Trains the same decoder-only model as Tessera's built-in `gpt` (token and
position embeddings, pre-LayerNorm blocks with causal multi-head attention
and a GELU MLP, final LayerNorm, head tied to the token embedding) with
torch.nn.parallel.DistributedDataParallel over the gloo backend, one CPU
thread per process, and prints the mean step time as one JSON object.

    python3 benchmarks/torch_ddp_gpt.py --ranks 2 --steps 30

Needs Debian's python3-torch. Run it next to the Tessera measurement
(benchmarks/compare_ddp.sh does both) so both see the same machine load.
"""
import argparse
import json
import math
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads, ratio):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d, eps=1e-5)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d, eps=1e-5)
        self.fc = nn.Linear(d, ratio * d)
        self.out = nn.Linear(ratio * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        shape = (b, t, self.heads, d // self.heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, vocab, layers, d, heads, seq_len, ratio):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq_len, d)
        self.blocks = nn.ModuleList(Block(d, heads, ratio) for _ in range(layers))
        self.lnf = nn.LayerNorm(d, eps=1e-5)
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, tokens, targets):
        t = tokens.shape[1]
        x = self.wte(tokens) + self.wpe(torch.arange(t, device=tokens.device))
        for block in self.blocks:
            x = block(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def worker(rank, args, port, queue):
    torch.set_num_threads(args.threads)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    torch.manual_seed(args.seed)
    model = Gpt(args.vocab, args.layers, args.d_model, args.heads, args.seq_len, 4)
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=25)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3, weight_decay=0.0)
    per_rank = args.batch // args.ranks
    gen = torch.Generator().manual_seed(args.seed + rank)
    times = []
    for step in range(args.warmup + args.steps):
        data = torch.randint(0, args.vocab, (per_rank, args.seq_len + 1), generator=gen)
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = ddp(data[:, :-1], data[:, 1:])
        loss.backward()
        opt.step()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    # The slowest rank sets the pace of a synchronous step.
    mean = torch.tensor([sum(times) / len(times)])
    dist.all_reduce(mean, op=dist.ReduceOp.MAX)
    if rank == 0:
        queue.put({
            "framework": "pytorch-ddp",
            "torch": torch.__version__,
            "backend": "gloo",
            "ranks": args.ranks,
            "threads": args.threads,
            "parameters": sum(p.numel() for p in model.parameters()),
            "global_batch": args.batch,
            "seq_len": args.seq_len,
            "steps_timed": args.steps,
            "step_ms": mean.item() * 1e3,
            "final_loss": loss.item(),
        })
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=16, help="global batch (sequences)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per process")
    args = p.parse_args()
    if args.batch % args.ranks != 0:
        p.error("--batch must be a multiple of --ranks")
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    mp.spawn(worker, args=(args, free_port(), queue), nprocs=args.ranks, join=True)
    print(json.dumps(queue.get()))


if __name__ == "__main__":
    main()
