"""`code-puppy -p`: one headless turn, its output in the chosen format, its end as an exit code."""
