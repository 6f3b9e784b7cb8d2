"""What every role shares and that depends on nothing else of spiderd: secrets, retry, blocking work, HTTP."""
