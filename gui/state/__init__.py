"""The window's state without Qt: the session, its file, undo, the outcomes and checks."""
