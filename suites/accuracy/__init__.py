"""The accuracy-alignment suite: is the served model the model? (docs/guides/accuracy.md)"""
