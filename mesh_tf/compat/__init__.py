"""Mesh TensorFlow compatibility: the original's names and conventions that
ported programs rely on, kept apart from mesh-tf's own API.

Nothing here imports TensorFlow at import time.
"""
