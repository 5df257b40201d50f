"""Analyses shared by every rule: names, dtypes, float16 reachability, the gradient path.

Rules are thin queries over these; an analysis never imports a rule.
"""
