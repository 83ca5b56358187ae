"""How long timm-minimal-app takes on this machine: start to serving, the first answer (the checkpoint loads),
and the median of the next answers, for one shipped MNIST test digit over HTTP (gradio_client).

    python scripts/app_latency.py [--checkpoint vit_minimal_sym_6x4.mnist] [--repeats 5]
    python scripts/app_latency.py --baseline-src ../app-before   # the same against another source tree

Prints a table with the CPU, its flags and the versions; each app runs in a fresh process, as a user starts it.
With ``--baseline-src DIR`` a second app runs from the package in DIR (a checkout of an earlier commit), the two
are started one after the other and answer in turns, and the table gives each one and the ratio.
"""
import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Optional


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _start(src: Optional[str]) -> Dict:
    """An app process (from ``src`` where given) and its client, once it serves; the seconds that took."""
    from gradio_client import Client
    port, env = _free_port(), dict(os.environ)
    if src:
        env['PYTHONPATH'] = os.path.abspath(src) + os.pathsep + env.get('PYTHONPATH', '')
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, '-m', 'timm_minimal.tools.inside.app', '--port', str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=src or None)
    while True:
        try:
            client = Client(f'http://127.0.0.1:{port}/', verbose=False)
            return dict(proc=proc, client=client, serving=time.perf_counter() - t0, times=[])
        except Exception:  # noqa: BLE001 (not serving yet)
            if proc.poll() is not None or time.perf_counter() - t0 > 120:
                proc.terminate()
                raise SystemExit('the app did not start')
            time.sleep(0.2)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--checkpoint', default='vit_minimal_sym_6x4.mnist')
    p.add_argument('--repeats', type=int, default=5)
    p.add_argument('--baseline-src', default=None, metavar='DIR',
                   help='also time the app of the timm_minimal package in DIR, answering in turns with this one')
    args = p.parse_args()
    import gradio
    import torch
    from gradio_client import handle_file
    from timm_minimal import example_images
    from timm_minimal.machine import cpu_signature
    digit = next(e for e in example_images() if 'digit7' in e)
    names = ['this tree'] + (['baseline'] if args.baseline_src else [])
    apps: List[Dict] = []
    try:
        for src in [None, args.baseline_src][:len(names)]:
            apps.append(_start(src))
        for _ in range(1 + args.repeats):
            for app in apps:
                t = time.perf_counter()
                app['client'].predict(args.checkpoint, None, handle_file(digit), 'image', api_name='/explore')
                app['times'].append(time.perf_counter() - t)
    finally:
        for app in apps:
            app['proc'].terminate()
            app['proc'].wait()
    cpu = cpu_signature()
    print(f"device: {cpu['cpu']}, {cpu['cores']} cores, flags {cpu['flags']}; torch {torch.__version__}, "
          f"gradio {gradio.__version__}; checkpoint {args.checkpoint}")
    print('| app | start to serving (s) | first answer (s) | later answers, median (s) | later / baseline |')
    print('|---|---:|---:|---:|---:|')
    later = [statistics.median(app['times'][1:]) for app in apps]
    for name, app, median in zip(names, apps, later):
        ratio = f'{median / later[-1]:.2f}' if len(apps) > 1 else ''
        print(f"| {name} | {app['serving']:.1f} | {app['times'][0]:.2f} | {median:.2f} | {ratio} |")
    return 0


if __name__ == '__main__':
    sys.exit(main())
