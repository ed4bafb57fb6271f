"""The parts of a run's state that `RunStore` (bot/store/runs.py) holds."""
