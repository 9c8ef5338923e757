"""Cluster mode: many services on one GPU pool under one virtual clock (``ebb simulate --cluster``)."""
