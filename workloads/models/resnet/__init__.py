"""ResNet for CIFAR-10 (task 1a): the network in model.py."""
