"""The operator's commands that run outside AWS Lambda (installed with the project, not in the layer)."""
