"""torchlint's rules, one module per rule (``tlNNN_<name>.py``), found by ``torchlint.registry``."""
