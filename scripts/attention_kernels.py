"""What one attention layer of a 6x4 CIFAR-10 model costs on this CPU, by kernel: the 4 heads of 15 columns through
SDPA as the model runs them (true width; padded to 16 as its training step does), the explicit softmax(q k^T) v
(eager and compiled), the same with the heads folded into the batch (``baddbmm``, ``bmm``) and, for scale, one head of 60 columns through SDPA, which does the same FLOPs.

    python scripts/attention_kernels.py --threads 2 --batch 256 --rounds 12
    python scripts/attention_kernels.py --threads 2 --batch 256 --rounds 12 --dtype bfloat16

The attention alone (queries, keys and values given, the heads split and merged as the model does, no projections),
symmetric as in ``sym_6x4`` (the keys are the queries), in inference (``torch.inference_mode``) and in training
(forward and backward). The kernels run in turn, the order rotated every round; the table gives each one's median
milliseconds per layer and its time over the true-width SDPA's.
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F


def kernels(batch: int, tokens: int, dim: int, heads: int):
    width = dim // heads
    scale, pad = width ** -0.5, [0, (-width) % 8]

    def split(qv):
        q, v = qv.chunk(2, -1)
        return (t.reshape(batch, tokens, heads, width).transpose(1, 2) for t in (q, v))

    def merge(x):
        return x.transpose(1, 2).reshape(batch, tokens, dim)

    def sdpa(qv):
        q, v = split(qv)
        return merge(F.scaled_dot_product_attention(q, q, v, scale=scale))

    def sdpa_padded(qv):
        q, v = (F.pad(t, pad) for t in split(qv))
        return merge(F.scaled_dot_product_attention(q, q, v, scale=scale)[..., :width])

    def explicit(qv):
        q, v = split(qv)
        return merge(((q * scale) @ q.transpose(-2, -1)).softmax(-1) @ v)

    def folded(qv):
        q, v = (t.reshape(batch * heads, tokens, width) for t in split(qv))
        scores = torch.baddbmm(q.new_empty(()), q, q.transpose(1, 2), beta=0, alpha=scale)
        return merge(torch.bmm(scores.softmax(-1), v).reshape(batch, heads, tokens, width))

    def one_head(qv):
        q, v = (t.unsqueeze(1) for t in qv.chunk(2, -1))
        return F.scaled_dot_product_attention(q, q, v).squeeze(1)
    return {f'SDPA, {heads} heads of {width}': sdpa, f'SDPA, {heads} heads padded to {width + pad[1]}': sdpa_padded,
            'explicit softmax(q k^T) v': explicit,
            'explicit, torch.compile': torch.compile(explicit, dynamic=False),
            'baddbmm, heads folded into the batch': folded,
            f'SDPA, 1 head of {dim} (same FLOPs)': one_head}


def timed(fn, qv, grad, steps):
    g = qv.new_ones(qv.shape[0], qv.shape[1], qv.shape[2] // 2)
    t0 = time.perf_counter()
    for _ in range(steps):
        if grad:
            x = qv.detach().requires_grad_()
            fn(x).backward(g)
        else:
            with torch.inference_mode():
                fn(qv)
    return (time.perf_counter() - t0) / steps * 1e3


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--threads', type=int, default=2)
    p.add_argument('--batch', type=int, default=256)
    p.add_argument('--tokens', type=int, default=64, help='64: CIFAR-10 at patch 4')
    p.add_argument('--dim', type=int, default=60)
    p.add_argument('--heads', type=int, default=4)
    p.add_argument('--steps', type=int, default=5, help='calls per timed block')
    p.add_argument('--rounds', type=int, default=12)
    p.add_argument('--dtype', choices=('float32', 'bfloat16'), default='float32',
                   help='of the queries, keys and values (bfloat16: as bf16 autocast gives them to the attention)')
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    qv = torch.randn(args.batch, args.tokens, 2 * args.dim).to(getattr(torch, args.dtype))
    fns = kernels(args.batch, args.tokens, args.dim, args.heads)
    with torch.inference_mode():
        ref = next(iter(fns.values()))(qv.float())
        err = max((fns[name](qv).float() - ref).abs().max().item() for name in list(fns)[:-1])  # the last: another model
    print(f'torch {torch.__version__}, {args.threads} thread(s), batch {args.batch}, {args.tokens} tokens, '
          f'width {args.dim}, {args.dtype}; largest difference from the fp32 true-width SDPA: {err:.1e}')
    print('| kernel | inference ms | / SDPA | training ms (fwd+bwd) | / SDPA |\n|---|---:|---:|---:|---:|')
    results = {}
    for grad in (False, True):
        times = {name: [] for name in fns}
        for name, fn in fns.items():
            timed(fn, qv, grad, 2)  # warm-up (and the compilation)
        names = list(fns)
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                times[name].append(timed(fns[name], qv, grad, args.steps))
        results[grad] = {name: statistics.median(t) for name, t in times.items()}
    base = {grad: next(iter(results[grad].values())) for grad in results}
    for name in fns:
        print(f'| {name} | {results[False][name]:.2f} | {results[False][name] / base[False]:.2f} | '
              f'{results[True][name]:.2f} | {results[True][name] / base[True]:.2f} |')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
