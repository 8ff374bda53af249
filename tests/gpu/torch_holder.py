"""Holds GPU memory with a real torch allocation until signalled (real-GPU check only)."""
import signal
import sys
import time

import torch


def main():
    gib, on_term, ready = float(sys.argv[1]), sys.argv[2], sys.argv[3]
    if on_term == 'ignore':
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    block = torch.empty(int(gib * 2 ** 30), dtype=torch.uint8, device='cuda')
    block.fill_(1)
    torch.cuda.synchronize()
    with open(ready, 'w') as handle:
        handle.write('ok')
    while True:
        time.sleep(3600)


if __name__ == '__main__':
    main()
