"""Record batches, magic v2: header view, validation, builders, readers, compression. Pure bytes, no I/O."""
