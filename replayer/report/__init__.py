"""Rendering a comparison: terminal, HTML and its SVG charts."""
