"""The markdown report: its sections, findings and HTA's view."""
