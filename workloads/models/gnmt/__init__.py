"""GNMT translation model (task 4a): the network in model.py."""
