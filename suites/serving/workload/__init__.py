"""What a serving run sends: length distributions, datasets, and exact-length prompts in
the target's tokenizer."""
