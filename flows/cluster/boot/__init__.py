"""Boots.

Start ranks, watch them to ready, read their timelines, keep evidence, empty caches, remember
sessions.
"""
