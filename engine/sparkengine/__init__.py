"""sparkengine: the bundled reference serving engine."""
