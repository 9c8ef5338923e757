"""In-memory fakes of Ebb's seams, shipped for tests (ours and users')."""
