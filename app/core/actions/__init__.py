"""What is done with a verdict (SPEC R18): rules that answer what a driver should write
back to the cluster, over the stages' own readers."""
