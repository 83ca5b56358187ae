"""What data parallelism costs a CPU split: the bare training step of two processes, each stepping its half of the
batch, as independent processes (what the CPU decision's probe measures), with torch's DistributedDataParallel over
gloo (what the trainer runs, through accelerate), and with one flat all-reduce of the gradients after the backward.

    python scripts/ddp_cpu_overhead.py --model vit_minimal_sym_6x4.cifar10 --batch 256 --rounds 3

The modes run in turn, the order reversed every other round; each prints the images per second of both processes
together (rank 0's time; the processes start together at a barrier), and the table gives each mode's median and its
ratio to the independent processes' median. One thread per process.
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

MODES = ('independent', 'ddp', 'flat-allreduce')


def _worker(rank: int, mode: str, model: str, batch: int, steps: int, port: int, queue) -> None:
    import timm
    import timm_minimal  # noqa: F401 (registers the architectures)
    from timm_minimal.models.layers import set_head_padding
    from torch.nn.parallel import DistributedDataParallel
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group('gloo', rank=rank, world_size=2)
    torch.manual_seed(0)
    net = timm.create_model(model).train()
    set_head_padding(net, False)
    params, input_size = list(net.parameters()), net.pretrained_cfg['input_size']
    if mode == 'ddp':
        net = DistributedDataParallel(net)
    opt = torch.optim.AdamW(params, lr=1e-4)
    x = torch.randn(batch // 2, *input_size)
    y = torch.randint(0, 10, (batch // 2,))

    def step():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(net(x), y).backward()
        if mode == 'flat-allreduce':
            flat = torch.cat([p.grad.reshape(-1) for p in params])
            dist.all_reduce(flat)
            torch.nn.utils.vector_to_parameters(flat / 2, [p.grad for p in params])
        opt.step()

    for _ in range(5):
        step()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    if rank == 0:
        queue.put(batch * steps / (time.perf_counter() - t0))
    dist.destroy_process_group()


def measure(mode: str, model: str, batch: int, steps: int, port: int) -> float:
    import torch.multiprocessing as mp
    ctx = mp.get_context('spawn')
    queue = ctx.SimpleQueue()
    mp.start_processes(_worker, args=(mode, model, batch, steps, port, queue), nprocs=2, start_method='spawn')
    return queue.get()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--model', default='vit_minimal_sym_6x4.cifar10')
    p.add_argument('--batch', type=int, default=256, help='the global batch (each process steps half)')
    p.add_argument('--steps', type=int, default=60, help='timed steps per measurement')
    p.add_argument('--rounds', type=int, default=3)
    p.add_argument('--port', type=int, default=29533)
    args = p.parse_args(argv)
    rates = {m: [] for m in MODES}
    for r in range(args.rounds):
        for mode in (MODES if r % 2 == 0 else MODES[::-1]):
            rate = measure(mode, args.model, args.batch, args.steps, args.port)
            rates[mode].append(rate)
            print(f'round {r + 1}: {mode} {rate:,.0f} img/s', flush=True)
    base = statistics.median(rates['independent'])
    from timm_minimal.machine import cpu_signature
    print(f'\n{args.model}, global batch {args.batch}, 2 processes x 1 thread, torch {torch.__version__}; '
          f'{cpu_signature()["cpu"]}, CPU flags: {cpu_signature()["flags"]}')
    print('| mode | img/s (median) | range | / independent |\n|---|---:|---:|---:|')
    for mode in MODES:
        med = statistics.median(rates[mode])
        print(f'| {mode} | {med:,.0f} | {min(rates[mode]):,.0f}-{max(rates[mode]):,.0f} | {med / base:.2f} |')
    return 0


if __name__ == '__main__':
    sys.exit(main())
