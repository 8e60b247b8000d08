"""The Kafka client side that both the broker and the Spark source/sink use, as Kafka's ``clients`` module sits
under its broker: connections with TLS and SASL (``security``: :func:`client_security`, :func:`open_connection`),
the key and trust stores (``tls``), the SCRAM formulas (``scram``), ``sasl.jaas.config`` (``jaas``), and the
columnar record code of tidelog's own Spark clients (``columnar`` and its C twin ``_columnar``: v2 batches decoded
into Arrow columns; Kafka's murmur2 partitioner and a ``RecordAccumulator`` that encodes rows into batches).

It imports ``records`` and ``protocol`` only; ``broker``, ``cluster``, ``spark`` and ``cli`` import it
(``tests/test_layers.py``).
"""
