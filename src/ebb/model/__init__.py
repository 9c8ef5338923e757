"""Pure data shared by every layer: ids, units and records. No I/O, no third-party clients."""
