"""Build kinds and distribution.

Build a release once, put it on every node, prove they hold the same build.
"""
