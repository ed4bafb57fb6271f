"""Runs as jobs: started, executed, settled, their next turns, workers, the sweeper."""
