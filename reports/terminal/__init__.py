"""What a command prints of a stored run in the terminal (rich tables and plain lines):
the terminal's side of presentation, as the HTML report is reports/' other side."""
