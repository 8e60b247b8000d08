"""Before a console command hands the connection to librdkafka: one connection with tidelog's own client, set up
as librdkafka's will be (TLS, SASL login, from ``--command-config``), that sends ApiVersions and an empty Metadata.

librdkafka takes a refused login, a TLS handshake that fails, or a client that speaks PLAINTEXT to a TLS or SASL
listener, for a transport error it retries until the command's own timeout (30 s), and then says only
``_TRANSPORT: Broker transport failure``. This check says what failed and why, at once (issue 25 item 4). It
settles nothing else: a check that cannot finish in time, or anything it did not foresee, leaves the command to
run as before."""

from __future__ import annotations

import asyncio
import ssl

from tidelog.client.security import ClientSecurity, SaslClientError
from tidelog.cluster.peer import Peer

API_VERSIONS, METADATA = 18, 3
CHECK_TIMEOUT_S = 10.0


class LoginProblem(Exception):
    """What stops a client from using the listener at ``host:port``; the message says it in one line."""


async def _check(host: str, port: int, security: ClientSecurity | None, timeout: float) -> None:
    peer = Peer(host, port, "tidelog-cli", security)
    protocol = security.protocol if security is not None else "PLAINTEXT"
    try:
        await peer.request(API_VERSIONS, 0, {}, timeout)
        # an empty topic list (v1+): names nothing, creates nothing, needs no ACL; a SASL listener not logged in
        # to closes the connection here (ApiVersions is allowed before the login)
        await peer.request(METADATA, 1, {"topics": []}, timeout)
    except SaslClientError as exc:
        raise LoginProblem(f"login to {host}:{port} failed: {exc}") from None
    except ssl.SSLCertVerificationError as exc:
        raise LoginProblem(
            f"TLS handshake with {host}:{port} failed: the broker's certificate is not trusted "
            f"({exc.verify_message}); name the CA that signed it in ssl.truststore.location (--command-config)"
        ) from None
    except ssl.SSLError as exc:
        reason = exc.reason or str(exc)
        hint = ""
        if reason in ("WRONG_VERSION_NUMBER", "UNEXPECTED_EOF_WHILE_READING", "RECORD_LAYER_FAILURE"):
            hint = f"; is {host}:{port} a TLS listener? security.protocol is {protocol}"
        raise LoginProblem(f"TLS handshake with {host}:{port} failed: {reason}{hint}") from None
    except (asyncio.IncompleteReadError, ConnectionResetError, BrokenPipeError) as exc:
        if protocol in ("PLAINTEXT", "SSL"):
            raise LoginProblem(
                f"{host}:{port} closed the connection at the first request: it expects "
                f"{'TLS or ' if protocol == 'PLAINTEXT' else ''}a SASL login, and security.protocol is {protocol} "
                "(set the listener's in --command-config)") from None
        raise LoginProblem(f"{host}:{port} closed the connection at the first request ({type(exc).__name__})") \
            from None
    finally:
        peer.close()


def check_listener(host: str, port: int, security: ClientSecurity | None,
                   timeout: float = CHECK_TIMEOUT_S) -> None:
    """Raise :class:`LoginProblem` when the listener at ``host:port`` refuses this client's TLS or login; return
    when it answered, or when the check could not decide (timeout, another error, an event loop running)."""
    try:
        asyncio.get_running_loop()
        return  # inside a loop (a command of tidelog's own client): it reports these failures itself
    except RuntimeError:
        pass
    try:
        asyncio.run(_check(host, port, security, timeout))
    except LoginProblem:
        raise
    except Exception:  # undecided: librdkafka's own connection says what it finds
        return
