"""The operator console (Textual); it talks only to the control API."""
