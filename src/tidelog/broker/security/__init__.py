"""Listener security: TLS (``tls``), SASL mechanisms (``sasl``), SCRAM credentials (``scram``) and the
listeners' settings (``listeners``). The connection side (handshakes, the SASL exchange before any other
request) is in ``tidelog.broker.server``."""
