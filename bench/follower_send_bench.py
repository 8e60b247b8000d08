"""CPU of sending one follower Fetch answer over loopback TCP, by the ways the leader can send it (issue 30).

    .venv/bin/python bench/follower_send_bench.py [--sizes 16384,65536,262144] [--answers 3000] [--repeats 3]

A child process reads each answer (``recv_into`` until the announced bytes are in) and answers with 64 bytes,
as a follower's next Fetch would; the parent sends ``--answers`` answers of a 60-byte header, the records
(from a file in the page cache) and a 3-byte trailer, in three ways:

* ``sendfile``: the header with ``MSG_MORE``, the records by ``os.sendfile``, the trailer by ``send`` (what
  ``broker/connection_io.write_chunks`` does for a follower answer above ``FOLLOWER_INLINE_RECORDS_MAX``);
* ``pread+sendmsg``: the records ``preadv`` into a reused buffer, then one ``sendmsg`` of all three;
* ``pread bytes``: ``os.pread`` (a new bytes object per answer), then one ``sendmsg``.

CPU (utime + stime of each process, from ``resource.getrusage``) per answer, best of ``--repeats``, and the
ratio to ``sendfile``. Loopback runs the receiver's TCP input in the sender's context, so the sender's figure
includes it, as the leader's does in a cluster on one host.
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import tempfile

HEADER, TRAILER, ACK = 60, 3, 64
MODES = ("sendfile", "pread+sendmsg", "pread bytes")


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _reader(conn: socket.socket, per: int, answers: int, out: int) -> None:
    buf = bytearray(max(per, 1 << 16))
    t0 = _cpu()
    for _ in range(answers):
        got = 0
        while got < per:
            n = conn.recv_into(buf, min(len(buf), per - got))
            if not n:
                os._exit(1)
            got += n
        conn.sendall(b"a" * ACK)
    os.write(out, f"{_cpu() - t0:.9f}".encode())


def run(mode: str, fd: int, size: int, answers: int) -> tuple[float, float]:
    """(sender, reader) CPU seconds per answer."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    s = socket.create_connection(ls.getsockname())
    c, _ = ls.accept()
    ls.close()
    for sock in (s, c):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    per = HEADER + size + TRAILER
    rpipe, wpipe = os.pipe()
    pid = os.fork()
    if pid == 0:
        s.close()
        os.close(rpipe)
        try:
            _reader(c, per, answers, wpipe)
        finally:
            os._exit(0)
    c.close()
    os.close(wpipe)
    header, trailer = b"h" * HEADER, b"t" * TRAILER
    buf, ack = bytearray(size), bytearray(ACK)
    slots = max(1, (8 << 20) // size)
    t0 = _cpu()
    for i in range(answers):
        pos = (i % slots) * size
        if mode == "sendfile":
            s.sendmsg([header], (), socket.MSG_MORE)
            sent = 0
            while sent < size:
                sent += os.sendfile(s.fileno(), fd, pos + sent, size - sent)
            s.sendall(trailer)
        elif mode == "pread+sendmsg":
            os.preadv(fd, [buf], pos)
            s.sendmsg([header, buf, trailer])
        else:
            s.sendmsg([header, os.pread(fd, size, pos), trailer])
        got = 0
        while got < ACK:
            got += s.recv_into(memoryview(ack)[got:])
    sender = _cpu() - t0
    os.waitpid(pid, 0)
    reader = float(os.read(rpipe, 64) or b"nan")
    os.close(rpipe)
    s.close()
    return sender / answers, reader / answers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="16384,65536,262144", help="record bytes per answer")
    ap.add_argument("--answers", type=int, default=3000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    with tempfile.NamedTemporaryFile(prefix="follower-send-") as f:
        f.write(os.urandom(8 << 20))
        f.flush()
        fd = os.open(f.name, os.O_RDONLY)
        print(f"load average {os.getloadavg()[0]:.1f}; {args.answers} answers, best of {args.repeats}")
        print(f"{'records':>9} | " + " | ".join(f"{m + ' us':>20}" for m in MODES) + " | ratios to sendfile")
        for size in sizes:
            best = {m: (float("inf"), float("inf")) for m in MODES}
            for _ in range(args.repeats):
                for m in MODES:  # interleaved, so that the machine's load moves all alike
                    got = run(m, fd, size, args.answers)
                    if got[0] < best[m][0]:
                        best[m] = got
            base = best["sendfile"][0]
            cells = " | ".join(f"{best[m][0] * 1e6:8.1f} (rd {best[m][1] * 1e6:5.1f})" for m in MODES)
            ratios = " / ".join(f"{best[m][0] / base:.2f}x" for m in MODES[1:])
            print(f"{size:>9} | {cells} | {ratios}")
        os.close(fd)


if __name__ == "__main__":
    main()
