from code_puppy.cli import cli

cli()
