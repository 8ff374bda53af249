"""The stand-in's multi-node ranks: a MODEL of how SGLang's nodes of one server depend on each other.

A model, not a measurement: the lab has no NCCL and no GPUs. What it reproduces is what a redeploy of a
server spanning hosts can observe (sglang docs, references/multi_node_deployment; sglang issues 3099,
4780 and 23627):
- Every node runs the same launch_server with the total --tp-size, --nnodes N, --dist-init-addr HOST:PORT
  (rank 0's rendezvous address) and its own --node-rank. --dist-init-addr is required when N > 1 and
  --tp-size must divide by N; a bad combination exits 2 as argparse does. Each node spawns tp_size/N
  schedulers titled ``sglang::scheduler_TP<global rank>``, each holding one of the node's own GPUs.
- Rank 0 serves HTTP and listens on the dist-init address (a plain TCP rendezvous standing in for
  torch.distributed's store). Each rank > 0 serves no HTTP at all: it connects (retrying while rank 0 is
  not listening yet, until LAB_STANDIN_DIST_TIMEOUT seconds, default 300, then exits 1) and announces its
  rank. Rank 0 answers /health 200 only once its warm-up is over AND every rank 1..N-1 joined; a rank
  already joined (a duplicate, or one coming back after it was lost: NCCL's group forms once) is refused
  and that process exits 1.
- The connection stays open for the server's life, as the process group does. A graceful stop (SIGTERM)
  of any rank says goodbye on it: rank 0's goodbye, sent after its drain, ends every other rank cleanly
  (exit 0, as destroying the process group does); a rank > 0 that says goodbye is gone all the same, and
  rank 0 is left degraded as below.
- A peer lost WITHOUT goodbye (SIGKILL, a crash: the connection's EOF) is upstream's failure. Rank 0 keeps
  answering /health 200 (issue 4780: the HTTP side never notices) while /generate, /health_generate and
  streams fail fast (HTTP 500, 503 for /health_generate) with a message naming the lost rank; upstream
  they hang until a timeout, which the stand-in shortens to "at once" so tests need not wait for it.
  A rank > 0 whose rank 0 vanished hangs inside the collective holding its GPU memory (issues 3099,
  23627), IGNORING SIGTERM (its main thread is stuck in NCCL), until its watchdog (LAB_STANDIN_WATCHDOG
  seconds, default 300, standing in for NCCL's) ends it with exit 1; SIGKILL still ends it at once, and
  its schedulers die on a signal sent to them (what gpu_release does).
The wire protocol is one line each way: ``join RANK NNODES`` then ``welcome`` or ``refused REASON``;
later ``bye`` from either side; EOF without it is a lost peer.
"""
import os
import signal
import socket
import sys
import threading
import time

DIST_TIMEOUT_ENV = 'LAB_STANDIN_DIST_TIMEOUT'
WATCHDOG_ENV = 'LAB_STANDIN_WATCHDOG'
BYE = b'bye\n'


def add_flags(parser):
    """SGLang's multi-node flags (server_args names: nnodes, node_rank, dist_init_addr)."""
    parser.add_argument('--nnodes', type=int, default=1)
    parser.add_argument('--node-rank', type=int, default=0)
    parser.add_argument('--dist-init-addr')


def split_addr(addr):
    """(host, port) of HOST:PORT; ValueError when it is not one."""
    host, colon, port = (addr or '').rpartition(':')
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError('--dist-init-addr must be HOST:PORT (got %r)' % addr)
    return host, int(port)


def flag_problem(nnodes, node_rank, dist_init_addr, tp_size):
    """What is wrong with the multi-node flags, or None."""
    if nnodes < 1:
        return '--nnodes must be at least 1 (got %d)' % nnodes
    if not 0 <= node_rank < nnodes:
        return '--node-rank must be from 0 to %d (got %d)' % (nnodes - 1, node_rank)
    if tp_size % nnodes:
        return '--tp-size %d is not divisible by --nnodes %d' % (tp_size, nnodes)
    if nnodes > 1 and not dist_init_addr:
        return '--dist-init-addr is required when --nnodes > 1'
    if dist_init_addr:
        try:
            split_addr(dist_init_addr)
        except ValueError as exc:
            return str(exc)
    return None


def check_flags(parser, args):
    """Exits 2 with argparse's usage message when the multi-node flags do not fit together."""
    problem = flag_problem(args.nnodes, args.node_rank, args.dist_init_addr, args.tp_size)
    if problem:
        parser.error(problem)


def local_schedulers(tp_size, nnodes, node_rank):
    """[(global TP rank, local GPU index)] of the schedulers this node runs."""
    per_node = tp_size // nnodes
    return [(node_rank * per_node + gpu, gpu) for gpu in range(per_node)]


def log(text):
    sys.stderr.write('standin ranks: %s\n' % text)
    sys.stderr.flush()


def send_line(sock, data):
    try:
        sock.sendall(data)
    except OSError:
        pass  # the peer is gone already: nothing left to tell it


class Leader(object):
    """Rank 0's side: the rendezvous listener and what it knows of ranks 1..N-1."""

    def __init__(self, nnodes, dist_init_addr):
        self.nnodes = nnodes
        self.addr = dist_init_addr
        self.lock = threading.Lock()
        self.joined = {}   # rank -> socket, for as long as it is connected
        self.gone = {}     # rank -> why it is gone ('lost' or 'left'); the group never heals
        self.listener = None

    def listen(self):
        """Binds the dist-init address (an OSError when it is taken) and accepts ranks from then on."""
        self.listener = socket.create_server(split_addr(self.addr), reuse_port=False)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                sock, peer = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _admission(self, line):
        """(rank, None) for a join this group takes, else (None, why it is refused)."""
        words = line.split()
        if len(words) != 3 or words[0] != 'join' or not words[1].isdigit() or not words[2].isdigit():
            return None, 'not a join: %r' % line
        rank, nnodes = int(words[1]), int(words[2])
        if nnodes != self.nnodes:
            return None, 'rank %d runs with --nnodes %d, this group has %d' % (rank, nnodes, self.nnodes)
        if not 0 < rank < self.nnodes:
            return None, 'rank %d is not a rank > 0 of a group of %d' % (rank, self.nnodes)
        if rank in self.joined or rank in self.gone:
            return None, 'rank %d already joined this group (it forms once: restart rank 0)' % rank
        return rank, None

    def _serve(self, sock):
        reader = sock.makefile('rb')
        with self.lock:
            rank, refusal = self._admission(reader.readline().decode('ascii', 'replace').strip())
            if rank is not None:
                self.joined[rank] = sock
        if rank is None:
            log('refused a rank: %s' % refusal)
            send_line(sock, ('refused %s\n' % refusal).encode())
            sock.close()
            return
        send_line(sock, b'welcome\n')
        log('rank %d joined' % rank)
        try:
            said = reader.readline()
        except OSError:
            said = b''
        with self.lock:
            self.joined.pop(rank, None)
            self.gone[rank] = 'left' if said == BYE else 'lost'
        log('rank %d %s' % (rank, 'left (goodbye)' if said == BYE else 'was lost (no goodbye)'))
        sock.close()

    def waiting_for(self):
        """The ranks that never joined yet."""
        with self.lock:
            return [rank for rank in range(1, self.nnodes) if rank not in self.joined and rank not in self.gone]

    def failure(self):
        """Why a collective cannot complete now (naming the ranks), or None."""
        with self.lock:
            gone = sorted(self.gone.items())
        if not gone:
            return None
        return '; '.join('rank %d of %d %s' % (rank, self.nnodes, 'left the group (stopped)' if why == 'left'
                                               else 'was lost (its connection closed without goodbye)')
                         for rank, why in gone) + ': the collective cannot complete, restart the whole group'

    def report(self):
        """internal_states' view of the group (not an upstream field)."""
        with self.lock:
            return {'nnodes': self.nnodes, 'dist_init_addr': self.addr, 'joined': sorted(self.joined),
                    'gone': dict((str(rank), why) for rank, why in sorted(self.gone.items()))}

    def goodbye(self):
        """Ends every rank still connected cleanly, as destroying the process group does."""
        with self.lock:
            socks = list(self.joined.values())
        for sock in socks:
            send_line(sock, BYE)
        if self.listener is not None:
            self.listener.close()


def join(resolved, stopping, deadline):
    """(socket, its reader) welcomed by rank 0; None when `stopping` was set first. Exits 1 on a refusal
    or when rank 0 did not listen before the deadline."""
    address = split_addr(resolved['dist_init_addr'])
    rank = resolved['node_rank']
    while not stopping.is_set():
        try:
            sock = socket.create_connection(address, timeout=5)
        except OSError as exc:
            if time.monotonic() >= deadline:
                log('rank %d: rank 0 at %s did not answer within %s s (%s)' % (
                    rank, resolved['dist_init_addr'], os.environ.get(DIST_TIMEOUT_ENV, '300'), exc))
                sys.exit(1)
            stopping.wait(0.1)
            continue
        sock.sendall(('join %d %d\n' % (rank, resolved['nnodes'])).encode())
        # One reader for the connection's life: a second one could miss what the first already buffered.
        reader = sock.makefile('rb')
        answer = reader.readline().decode('ascii', 'replace').strip()
        if answer != 'welcome':
            log('rank %d: rank 0 %s' % (rank, answer or 'closed the connection'))
            sys.exit(1)
        sock.settimeout(None)
        log('rank %d joined the group at %s' % (rank, resolved['dist_init_addr']))
        return sock, reader
    return None


def run_follower(resolved, schedulers):
    """A rank > 0 for its whole life: schedulers up, join, then wait for the group's end. Returns the exit status."""
    rank = resolved['node_rank']
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.set())
    signal.signal(signal.SIGINT, lambda signum, frame: stopping.set())
    schedulers.spawn()
    deadline = time.monotonic() + float(os.environ.get(DIST_TIMEOUT_ENV, '300'))
    try:
        joined = join(resolved, stopping, deadline)
    except SystemExit:
        schedulers.stop()
        raise
    if joined is None:
        schedulers.stop()
        return 0
    sock, reader = joined
    leader_said = []
    leader_done = threading.Event()

    def read_leader():
        try:
            leader_said.append(reader.readline())
        except OSError:
            leader_said.append(b'')
        leader_done.set()
    threading.Thread(target=read_leader, daemon=True).start()
    while not (stopping.is_set() or leader_done.wait(0.2)):
        if schedulers.any_died():
            # A crash: no goodbye, so rank 0 sees this rank lost (EOF) when the process exits.
            log('rank %d: a scheduler died, exiting' % rank)
            schedulers.stop()
            return 1
    if stopping.is_set():
        send_line(sock, BYE)
        log('rank %d: stopped (SIGTERM), said goodbye' % rank)
    elif leader_said == [BYE]:
        log('rank %d: rank 0 ended the group' % rank)
    else:
        return hang(rank, schedulers)
    sock.close()
    schedulers.stop()
    return 0


def hang(rank, schedulers):
    """Rank 0 vanished: stuck in the collective until the watchdog, SIGTERM ignored, GPU memory held."""
    watchdog = float(os.environ.get(WATCHDOG_ENV, '300'))

    def ignore(signum, frame):
        log('rank %d: ignoring signal %d: hung in the collective (watchdog in %s s)' % (rank, signum, watchdog))
    signal.signal(signal.SIGTERM, ignore)
    signal.signal(signal.SIGINT, ignore)
    log('rank %d: rank 0 was lost without goodbye: hung, holding the GPUs until the watchdog (%s s)' % (rank, watchdog))
    deadline = time.monotonic() + watchdog
    while time.monotonic() < deadline:
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
    log('rank %d: watchdog fired after %s s: exiting 1' % (rank, watchdog))
    schedulers.stop()
    return 1
