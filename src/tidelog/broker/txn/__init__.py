"""The transaction coordinator (KIP-98): its state in ``__transaction_state``, the state machine, the marker
channel, and the coordinator itself (see docs/decisions/0041-txn-coordinator.md)."""
