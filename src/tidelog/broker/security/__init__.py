"""Listener security: TLS (``tls``), SASL mechanisms (``sasl``), SCRAM credentials (``scram``), the listeners'
settings (``listeners``) and what the broker's own connections to other brokers use (``inter_broker``). The
connection side (handshakes, the SASL exchange before any other request) is in ``tidelog.broker.server``; what a
client does, and what both sides share (key/trust stores, SCRAM formulas, JAAS), is in ``tidelog.client``."""
