"""The terminal: rich consoles and the stage board, an observer of stage events."""
