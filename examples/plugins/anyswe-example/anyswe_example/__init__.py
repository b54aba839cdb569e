"""An example anyswe plugin: a benchmark (``example-kata``) and an agent (``example-shell``).

anyswe finds both through this package's entry points (pyproject.toml); a spec names them like
anyswe's own (spec.yaml beside this package).
"""
