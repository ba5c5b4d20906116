"""Helpers the tests share (summary builders made from the gates' typed models, ...)."""
