"""The SLO capacity search: the highest load at which given SLOs hold."""
