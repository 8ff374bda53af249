"""A STAND-IN for the SGLang server, for the lab only (no GPU, no model). See launch_server.py."""
