"""A share-group member (confluent-kafka ``ShareConsumer``) run as a subprocess, so a test can SIGKILL it.

Usage: ``python share_member.py BOOTSTRAP GROUP TOPIC [options as JSON]``. Prints one JSON object per line:
``{"event": "msg", "p": partition, "o": offset, "v": value, "n": delivery count, "t": time}`` for every record polled.

Options: ``ack`` ``implicit`` (default: a poll accepts the previous poll's records) or ``hold`` (explicit mode,
never acknowledges: the records stay acquired until the member dies and their locks expire) or ``accept``
(explicit mode: accepts the first ``accept_first`` records it polls, commits that, holds the rest until it dies;
prints ``{"event": "acked"}`` after the records of the poll where it committed); ``max_records`` (``max.poll.records``, default 10).
"""

from __future__ import annotations

import json
import signal
import sys
import time
from typing import Any


def emit(**kw: Any) -> None:
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()


def main() -> None:
    from confluent_kafka import AcknowledgeType, ShareConsumer

    bootstrap, group, topic = sys.argv[1:4]
    opts: dict[str, Any] = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    accept_first = int(opts.get("accept_first", 0)) if opts.get("ack") == "accept" else -1
    hold = opts.get("ack") in ("hold", "accept")
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "max.poll.records": int(opts.get("max_records", 10)),
                       "share.acknowledgement.mode": "explicit" if hold else "implicit"})
    c.subscribe([topic])
    stop = False

    def on_term(*_: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    held = False
    while not stop:
        if hold and held:  # explicit mode: polling again needs the previous records acknowledged; just wait
            signal.pause()
            continue
        for m in c.poll(0.5):
            if m.error():
                continue
            emit(event="msg", p=m.partition(), o=m.offset(), v=m.value().decode(), n=m.delivery_count(),
                 t=time.time())
            held = True
            if accept_first > 0:
                accept_first -= 1
                c.acknowledge(m, AcknowledgeType.ACCEPT)
                if accept_first == 0:
                    c.commit_sync(30)
                    accept_first = -2  # "acked" is told once the rest of this poll is printed
        if accept_first == -2:
            accept_first = -1
            emit(event="acked")
    if not hold:
        c.commit_sync(30)  # implicit mode: accept the last poll's records (close alone would release them)
    c.close()


if __name__ == "__main__":
    main()
