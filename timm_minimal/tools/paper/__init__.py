"""Reproducing the paper: the grid of its Tables 1 and 2, its reports, and one report over several grids."""
