"""Reports: the terminal view now; markdown and HTML later."""
