"""How long timm-minimal-app takes on this machine: start to serving, the first answer (the checkpoint loads),
and the median of the next answers, for one shipped MNIST test digit over HTTP (gradio_client).

    python scripts/app_latency.py [--checkpoint vit_minimal_sym_6x4.mnist] [--repeats 5]

Prints a table with the device and versions; the app runs in a fresh process, as a user starts it.
"""
import argparse
import os
import platform
import socket
import statistics
import subprocess
import sys
import time


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--checkpoint', default='vit_minimal_sym_6x4.mnist')
    p.add_argument('--repeats', type=int, default=5)
    args = p.parse_args()
    import gradio
    import torch
    from gradio_client import Client, handle_file
    from timm_minimal import example_images
    digit = next(e for e in example_images() if 'digit7' in e)
    port = _free_port()
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, '-m', 'timm_minimal.tools.inside.app', '--port', str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            try:
                client = Client(f'http://127.0.0.1:{port}/', verbose=False)
                break
            except Exception:  # noqa: BLE001 (not serving yet)
                if proc.poll() is not None or time.perf_counter() - t0 > 120:
                    raise SystemExit('the app did not start')
                time.sleep(0.2)
        serving = time.perf_counter() - t0
        times = []
        for _ in range(1 + args.repeats):
            t = time.perf_counter()
            client.predict(args.checkpoint, None, handle_file(digit), 'image', api_name='/explore')
            times.append(time.perf_counter() - t)
    finally:
        proc.terminate()
        proc.wait()
    print(f'device: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; torch {torch.__version__}, '
          f'gradio {gradio.__version__}; checkpoint {args.checkpoint}')
    print('| start to serving (s) | first answer (s) | later answers, median (s) |')
    print('|---:|---:|---:|')
    print(f'| {serving:.1f} | {times[0]:.2f} | {statistics.median(times[1:]):.2f} |')
    return 0


if __name__ == '__main__':
    sys.exit(main())
