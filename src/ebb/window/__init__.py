"""L1: sliding-window quantile sketches (filled by the L1 issue)."""
