"""Kernel source templates: each module is copied per configuration into a cache directory.

The lines between `# CONFIG` and `# END CONFIG` are replaced by the configuration's constants,
so numba compiles a specialised kernel whose on-disk cache lands beside the generated copy.
Nothing imports these modules directly.
"""
