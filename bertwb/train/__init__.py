"""Training, for every stage that trains: one loop (`trainer`) for any `Objective`, and its parts:
distributed setup, checkpoints, optimizer and schedule, device and precision, TensorBoard, where runs live.

Import the submodules directly; this package imports nothing, so `runs` stays torch-free.
"""
