"""Benchmarks (`make bench`); run each as `python -m benchmarks.<name>`."""
