"""Transformer translation model (task 4b): the network in model.py."""
