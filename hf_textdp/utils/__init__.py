"""Small utilities shared by the modules of hf-textdp (logging, atomic writes)."""
