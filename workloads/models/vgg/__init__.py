"""VGG-11 with batch norm for CIFAR-10 (the CS744 study): the network in model.py."""
