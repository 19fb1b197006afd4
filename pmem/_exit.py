"""Exit statuses every `pmem` command shares."""

#: a command stopped by Ctrl-C, after saying what it kept (128 + SIGINT, as a shell reports it)
EXIT_INTERRUPTED = 130
