"""The main window, its actions, and the benchmark's window plugin."""
