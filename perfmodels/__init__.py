"""perfmodels package."""
