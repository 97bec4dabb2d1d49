"""Logistic regression (task 2a): the network in model.py."""
