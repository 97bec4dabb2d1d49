"""AWD-LSTM language model (task 3a): the network in model.py."""
