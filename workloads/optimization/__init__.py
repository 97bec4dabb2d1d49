"""What a step minimizes and how the weights move.

objectives.py (each task's loss and scoring), optim.py (the optimizers a config can
name), sgd.py (SGD without torch.optim around it), schedule.py (learning-rate
schedules as pure functions of progress).
"""
