"""Starting the embedded targets (synthetic, reference) as child processes on 127.0.0.1."""
