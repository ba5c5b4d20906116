"""Declarative specs: strict models of clusters, engine profiles, releases, test classes, suites.

Everything a qualification needs is read from YAML through `flows.spec.load`, which turns every
mistake into a `SpecError` naming the file, the line and the key path before anything runs.
"""
