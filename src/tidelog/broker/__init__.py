"""The broker: asyncio server wiring the protocol to the storage engine."""
