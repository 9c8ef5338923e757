"""The Ebb node agent: samples GPU, host and local workers into 100 ms sketch buckets served over HTTP."""
