"""Dynamic batching: the asyncio scheduler (``batcher``), pure numpy merge/split (``merge``), the load hooks."""
