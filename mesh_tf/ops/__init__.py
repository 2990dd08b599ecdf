"""The op library, one module per op family."""
