"""Reusable Qt widgets: the heatmap, its axes and numbers, spin boxes, the head view."""
