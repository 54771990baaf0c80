"""Where the time goes between kernels: idle causes, launches, streams, the critical path."""
