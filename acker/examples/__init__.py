"""Example pipelines built with the spout and bolt of this package."""
