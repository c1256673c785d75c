"""What the window shows, computed without widgets: view models, numbers, sentences."""
