from code_puppy.main import cli

cli()
