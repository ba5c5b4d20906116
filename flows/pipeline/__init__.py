"""The pipeline's flows.

The prepared-cluster prelude, qualify, calibrate, promote, the stages and scheduling.
"""
