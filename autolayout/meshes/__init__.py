"""The mesh-shape search: every factorisation of a topology's chips into
named mesh axes, each solved for its layout (and training decisions)."""
