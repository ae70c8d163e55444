from tandem.cli import app

app()
