"""The accuracy-alignment suite: is the served model the model? (README "Accuracy alignment")"""
