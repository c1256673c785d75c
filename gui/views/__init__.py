"""The panels and tabs: each renders a part of the state."""
