"""The quickstart's small CNN for scikit-learn's 8x8 digits: the network in model.py."""
