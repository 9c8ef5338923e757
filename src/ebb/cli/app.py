"""The shared Typer application object (kept apart so command modules can import it cheaply)."""
