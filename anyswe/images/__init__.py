"""Task images: which image a task runs (resolve.py) and the benchmarks' own environment builds
(swebench's chain, the demo's), made in the local image store (sandbox/store.py); nothing is pulled."""
