"""Figures of the HTML report: pure functions from DataFrames to Plotly figures.

One idea per module. Every string that came from a user (scenario, metric, policy or
version names) is passed through ``text.plotly_text`` where it enters a figure, because
Plotly renders titles, labels, legends, hover text and table cells as HTML-like text.
Rendering the figures into a page is ``reports.render``'s job, not theirs.
"""
