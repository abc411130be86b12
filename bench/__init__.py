"""Benchmarks: each module is one command (`python -m bench.NAME`); `python -m bench.quick` runs
small versions of all of them. Results land in bench/results/*.json and docs/img/bench-*.png;
docs/benchmarks.md quotes them with the machine, the command and the date."""
