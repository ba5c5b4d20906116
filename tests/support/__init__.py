"""Helpers the tests share: free ports, waiting with a deadline, spec overlays."""
