#!/usr/bin/python3
"""PyTorch peer of one rank's `tessera train` step on one device.

--model mlp: the same model as Tessera's built-in `mlp` (dense layers with
GELU, tanh form, then a linear classifier with softmax cross-entropy) on
random classification data of benchmarks/mlp_cuda.toml's shapes;
--model gpt: Tessera's `gpt` (benchmarks/torch_ddp_gpt.py's model) on
random tokens of benchmarks/gpt_step.toml's shapes. AdamW; prints the mean
step time over the steps after the first as one JSON object.

    python3 benchmarks/torch_step.py --model gpt --device cuda --steps 30

`--tf32 off` (the default) keeps f32 products in f32, as Tessera's CUDA
units do. Run it next to the Tessera measurement so both see the same
machine.
"""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_ddp_gpt import Gpt


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["mlp", "gpt"], default="mlp")
    p.add_argument("--device", default="cuda")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=None, help="mlp: 512, gpt: 32")
    p.add_argument("--input", type=int, default=1024)
    p.add_argument("--hidden", default="4096,4096")
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--tf32", choices=["on", "off"], default="off")
    a = p.parse_args()
    if a.batch is None:
        a.batch = 512 if a.model == "mlp" else 32
    torch.backends.cuda.matmul.allow_tf32 = a.tf32 == "on"
    dev = torch.device(a.device)
    if a.model == "mlp":
        widths = [a.input] + [int(w) for w in a.hidden.split(",") if w]
        layers = []
        for i in range(len(widths) - 1):
            layers += [nn.Linear(widths[i], widths[i + 1]), nn.GELU(approximate="tanh")]
        layers.append(nn.Linear(widths[-1], a.classes))
        net = nn.Sequential(*layers).to(dev)
        x = torch.randn(a.batch, a.input, device=dev)
        y = torch.randint(0, a.classes, (a.batch,), device=dev)

        def objective():
            return F.cross_entropy(net(x), y)
    else:
        net = Gpt(a.vocab, a.layers, a.d_model, a.heads, a.seq_len, 4).to(dev)
        data = torch.randint(0, a.vocab, (a.batch, a.seq_len + 1), device=dev)

        def objective():
            return net(data[:, :-1], data[:, 1:])
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.01, eps=1e-8)
    times = []
    for _ in range(a.steps):
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        loss = objective()
        loss.backward()
        opt.step()
        loss_value = loss.item()  # the host reads the loss every step, as Tessera's log does
        if dev.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    rest = times[1:] or times
    print(json.dumps({"framework": "pytorch " + torch.__version__, "model": a.model,
                      "device": str(dev), "batch": a.batch,
                      "tf32": a.tf32, "steps": a.steps, "mean_step_ms": 1e3 * sum(rest) / len(rest),
                      "final_loss": loss_value}))


if __name__ == "__main__":
    main()
