from pipeline.cli.main import app

app()
